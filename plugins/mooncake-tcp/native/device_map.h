// Which registered regions of a mooncake-tcp transport are device memory (host regions are
// not listed). Header-only so that its tests need nothing else.
//
// Ordering against the registry (addon.cpp): a device region is listed here BEFORE the
// registry publishes it, so a request that passes the registry's check never finds it
// missing here (it would be treated as host memory: memcpy into device memory). It is
// delisted only AFTER the registry removed it and its last lease was released, and by the
// token its registration got: a registration of the same address made in between (a new
// entry, a new token) keeps its own entry. Entries may therefore overlap for a moment (a
// registration listed before the registry refuses it, a removed one not yet delisted);
// lookups find any entry that holds the address.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace tetcp {

/** Device ordinal of host memory. */
constexpr int kHost = -1;

class DeviceMap {
 public:
  /** Lists [addr, addr+len) as memory of `device`. Returns the entry's token (never 0). */
  uint64_t add(uint64_t addr, uint64_t len, int device) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    const uint64_t token = next_token_++;
    regions_[{addr, token}] = {len, device};
    if (len > max_len_) max_len_ = len;
    count_.store(static_cast<uint32_t>(regions_.size()), std::memory_order_release);
    return token;
  }
  /** Delists the entry `token` at `addr`; a no-op when there is none (another registration's entry stays). */
  void remove(uint64_t addr, uint64_t token) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (regions_.erase({addr, token}) == 0) return;
    max_len_ = 0;
    for (auto& [key, e] : regions_)
      if (e.first > max_len_) max_len_ = e.first;
    count_.store(static_cast<uint32_t>(regions_.size()), std::memory_order_release);
  }
  /** Device of the region holding `addr`, or kHost. A single relaxed load while no device memory is registered. */
  int device_of(uint64_t addr) const {
    if (count_.load(std::memory_order_relaxed) == 0) return kHost;
    return lookup(addr);
  }
  size_t size() const { return count_.load(std::memory_order_acquire); }

 private:
  int lookup(uint64_t addr) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    // Entries by start address, latest first; walk back while an entry could still reach
    // `addr` (no entry is longer than max_len_). Without overlaps the first one decides.
    auto it = regions_.upper_bound({addr, UINT64_MAX});
    while (it != regions_.begin()) {
      --it;
      const uint64_t off = addr - it->first.first;
      if (off < it->second.first) return it->second.second;
      if (off >= max_len_) break;
    }
    return kHost;
  }
  mutable std::shared_mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, int>> regions_;  // (start, token) -> (length, device)
  uint64_t max_len_ = 0;
  uint64_t next_token_ = 1;
  std::atomic<uint32_t> count_{0};
};

}  // namespace tetcp
