// barex's memory pool (the BAREX model: all transfer memory comes from it): one anonymous mapping, registered with the
// provider once, from which the application allocates all transfer memory (first fit, 64-byte aligned, neighbours
// coalesced on free). Process-wide: addresses stay valid for the process's life (JS views of pool memory may outlive
// any transport), so the mapping is never unmapped. The libfabric layer registers it once per rail as the transport's
// arena (Options::arena_*).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "te/status.h"

namespace te::barex {

class Pool {
 public:
  /** The process pool, created with `size` bytes on first use (later calls must not ask for more). */
  static Status instance(uint64_t size, Pool** out, std::string* err);
  /** The process pool if one exists. */
  static Pool* existing();

  Status allocate(uint64_t bytes, uint64_t* addr, std::string* err);
  Status free(uint64_t addr, std::string* err);
  bool contains(uint64_t addr, uint64_t len) const;
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  void stats(uint64_t* used, uint64_t* allocations) const;

  static constexpr uint64_t kAlign = 64;

 private:
  Pool(uint64_t base, uint64_t size);
  uint64_t base_, size_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // addr -> length
  std::map<uint64_t, uint64_t> used_;  // addr -> length
  uint64_t used_bytes_ = 0;
};

}  // namespace te::barex
