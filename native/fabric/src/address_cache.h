// The bookkeeping of a rail's address-vector cache, without libfabric: which raw peer
// address maps to which AV entry, in least recently used order and bounded, and which
// entries wait to be removed from the AV (forgotten or evicted ones, kept for a grace period
// because an operation or a queued message may still name them). The rail makes the
// provider calls (fi_av_insert, fi_av_remove) and holds its av_mu around every call here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <set>
#include <vector>

namespace te::fabric {

class AddressCache {
 public:
  using Addr = uint64_t;  // an AV entry (fi_addr_t)
  using Raw = std::vector<uint8_t>;
  static constexpr Addr kNone = ~Addr{0};  // FI_ADDR_NOTAVAIL
  static constexpr size_t kDefaultMaxEntries = 4096;
  /** Time a forgotten address stays in the AV at least: covers a caller between resolving an address and using it. */
  static constexpr int64_t kRetireGraceMs = 2000;

  /** The entry of `raw`, now the most recently used; kNone when it has none. */
  Addr touch(const Raw& raw);
  /** The entry of `raw` without changing the order; kNone when it has none. */
  Addr find(const Raw& raw) const;
  size_t size() const { return map_.size(); }
  /** At the bound: the next insert evicts. */
  bool full() const { return map_.size() >= max_entries; }
  /**
   * Maps `raw` to `fa` as the most recently used. Beyond max_entries the least recently used
   * entries are evicted, sparing `fa` and `pinned` (the entries peers opened here send to);
   * they retire at the next scan (nothing resolved them lately). Returns how many were evicted.
   */
  size_t insert(const Raw& raw, Addr fa, const std::set<Addr>& pinned, int64_t now);
  /** Drops the mapping of `raw`; its entry retires once the grace period is over. False if it had none. */
  bool forget(const Raw& raw, int64_t now);
  /**
   * The retiring entries whose grace period is over at `now`. An entry mapped again meanwhile
   * (a provider may hand out the same entry) is in use again and leaves the retiring set.
   */
  std::vector<Addr> due(int64_t now);
  /**
   * Of `due`, the entries to remove from the AV now: not mapped again, not in `used` (what
   * messages, operations and open peers name), still retiring. They leave the retiring set.
   */
  std::vector<Addr> take_removable(const std::vector<Addr>& due, const std::set<Addr>& used);
  bool retiring_empty() const { return retiring_.empty(); }
  size_t retiring_size() const { return retiring_.size(); }

  size_t max_entries = kDefaultMaxEntries;  // (tests lower it)

 private:
  struct Entry {
    Addr fa = kNone;
    std::list<Raw>::iterator lru;
  };
  std::set<Addr> mapped() const;
  size_t evict(Addr keep, const std::set<Addr>& pinned, int64_t now);

  std::map<Raw, Entry> map_;
  std::list<Raw> lru_;                // map_'s keys, most recently used first
  std::map<Addr, int64_t> retiring_;  // entry -> since when it retires
};

}  // namespace te::fabric
