// Registered memory of one transport instance.
//
// Readers (every request a peer sends, every local slice) look regions up concurrently
// under a shared lock; registration changes take the lock exclusively. Each access to
// registered memory holds a Lease that counts as in flight on its region, and
// unregister() removes the region and then waits until no lease remains: once it
// returns, no thread touches that memory again.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "te/status.h"

namespace te {

struct Region {
  uint64_t addr = 0;
  uint64_t length = 0;
  bool remote_access = false;
  std::atomic<int64_t> in_flight{0};
};

/** Whether [addr, addr+len) lies inside [base, base+size), without overflow. */
inline bool range_within(uint64_t base, uint64_t size, uint64_t addr, uint64_t len) {
  return addr >= base && len <= size && addr - base <= size - len;
}

/** Whether [addr, addr+len) reaches past 2^64 (a range may end exactly at 2^64). */
inline bool range_overflows(uint64_t addr, uint64_t len) { return len != 0 && len - 1 > UINT64_MAX - addr; }

/** An access permit for a registered range; releases on destruction. */
class Lease {
 public:
  Lease() = default;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Lease(Lease&& o) noexcept : region_(o.region_) { o.region_ = nullptr; }
  Lease& operator=(Lease&& o) noexcept {
    if (this != &o) {
      release();
      region_ = o.region_;
      o.region_ = nullptr;
    }
    return *this;
  }
  ~Lease() { release(); }
  void release() {
    if (region_) region_->in_flight.fetch_sub(1, std::memory_order_release);
    region_ = nullptr;
  }
  explicit operator bool() const { return region_ != nullptr; }
  /** Whether this lease already covers [addr, addr+len) (lets callers reuse it). */
  bool covers(uint64_t addr, uint64_t len) const {
    return region_ && range_within(region_->addr, region_->length, addr, len);
  }
  const Region* region() const { return region_; }

 private:
  friend class MemoryRegistry;
  Region* region_ = nullptr;
};

/**
 * A reader-writer lock that prefers writers: lookups run in parallel, and a stream of
 * lookups (10^5 per batch on several I/O threads) cannot starve register/unregister.
 */
class RwLock {
 public:
  RwLock();
  ~RwLock();
  RwLock(const RwLock&) = delete;
  RwLock& operator=(const RwLock&) = delete;
  void lock_shared() { pthread_rwlock_rdlock(&l_); }
  void unlock_shared() { pthread_rwlock_unlock(&l_); }
  void lock() { pthread_rwlock_wrlock(&l_); }
  void unlock() { pthread_rwlock_unlock(&l_); }

 private:
  pthread_rwlock_t l_;
};

class MemoryRegistry {
 public:
  /** Adds [addr, addr+length). OVERLAP if it intersects a region, INVALID_ARGUMENT for empty/wrapping ranges. */
  Status add(uint64_t addr, uint64_t length, bool remote_access);
  /**
   * Removes the region starting at `addr` and waits until every lease on it is released.
   * MEMORY_NOT_REGISTERED when no region starts there.
   */
  Status remove(uint64_t addr, uint64_t* length_out = nullptr);
  /**
   * Checks that [addr, addr+len) lies in one region (remote-accessible when `remote` is
   * set) and takes a lease on it. MEMORY_NOT_REGISTERED when no region holds `addr`
   * (or the region is local-only and `remote` is set), ADDRESS_OUT_OF_RANGE when the range
   * starts inside a region but does not end in it (or wraps around).
   */
  Status acquire(uint64_t addr, uint64_t len, bool remote, Lease& lease) const;
  /** Like acquire() without taking a lease (validation only; the answer may change afterwards). */
  Status check(uint64_t addr, uint64_t len, bool remote) const;
  /** Whether any region intersects [addr, addr+len) (memory about to be freed must not). */
  bool overlaps(uint64_t addr, uint64_t len) const;
  size_t size() const;

 private:
  Status find_locked(uint64_t addr, uint64_t len, bool remote, Region** out) const;
  mutable RwLock mu_;
  std::vector<std::shared_ptr<Region>> regions_;  // sorted by addr, disjoint
};

}  // namespace te
