#include "te/memory_registry.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>

namespace te {

RwLock::RwLock() {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
#ifdef PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
  pthread_rwlock_init(&l_, &a);
  pthread_rwlockattr_destroy(&a);
}
RwLock::~RwLock() { pthread_rwlock_destroy(&l_); }

namespace {
// First region whose start is > addr.
template <typename V>
auto upper(V& v, uint64_t addr) {
  return std::upper_bound(v.begin(), v.end(), addr,
                          [](uint64_t a, const std::shared_ptr<Region>& r) { return a < r->addr; });
}
}  // namespace

Status MemoryRegistry::add(uint64_t addr, uint64_t length, bool remote_access) {
  if (length == 0 || range_overflows(addr, length)) return TE_INVALID_ARGUMENT;
  std::unique_lock lock(mu_);
  auto it = upper(regions_, addr);
  if (it != regions_.end() && (*it)->addr - addr < length) return TE_MEMORY_OVERLAP;  // next starts inside
  if (it != regions_.begin()) {
    const Region& prev = **(it - 1);
    if (addr - prev.addr < prev.length) return TE_MEMORY_OVERLAP;  // we start inside prev
  }
  auto r = std::make_shared<Region>();
  r->addr = addr;
  r->length = length;
  r->remote_access = remote_access;
  regions_.insert(it, std::move(r));
  return TE_OK;
}

Status MemoryRegistry::remove(uint64_t addr, uint64_t* length_out) {
  std::shared_ptr<Region> victim;
  {
    std::unique_lock lock(mu_);
    auto it = upper(regions_, addr);
    if (it == regions_.begin() || (*(it - 1))->addr != addr) return TE_MEMORY_NOT_REGISTERED;
    victim = *(it - 1);
    regions_.erase(it - 1);
  }
  // No new lease can be taken now (leases are only taken under the shared lock while the
  // region is listed); wait for the ones in flight.
  for (unsigned spins = 0; victim->in_flight.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (length_out) *length_out = victim->length;
  return TE_OK;
}

Status MemoryRegistry::find_locked(uint64_t addr, uint64_t len, bool remote, Region** out) const {
  auto it = upper(regions_, addr);
  if (it == regions_.begin()) return TE_MEMORY_NOT_REGISTERED;
  Region* r = (it - 1)->get();
  if (addr - r->addr >= r->length) return TE_MEMORY_NOT_REGISTERED;  // in a gap
  if (remote && !r->remote_access) return TE_MEMORY_NOT_REGISTERED;
  if (range_overflows(addr, len) || !range_within(r->addr, r->length, addr, len)) return TE_ADDRESS_OUT_OF_RANGE;
  *out = r;
  return TE_OK;
}

Status MemoryRegistry::acquire(uint64_t addr, uint64_t len, bool remote, Lease& lease) const {
  lease.release();
  std::shared_lock lock(mu_);
  Region* r = nullptr;
  Status s = find_locked(addr, len, remote, &r);
  if (s != TE_OK) return s;
  r->in_flight.fetch_add(1, std::memory_order_acq_rel);
  lease.region_ = r;
  return TE_OK;
}

Status MemoryRegistry::check(uint64_t addr, uint64_t len, bool remote) const {
  std::shared_lock lock(mu_);
  Region* r = nullptr;
  return find_locked(addr, len, remote, &r);
}

bool MemoryRegistry::overlaps(uint64_t addr, uint64_t len) const {
  std::shared_lock lock(mu_);
  // The last region starting before the end is the only one that can reach into the range.
  auto it = upper(regions_, addr + len - 1);
  if (len == 0 || it == regions_.begin()) return false;
  const Region* r = (it - 1)->get();
  return r->addr + r->length > addr;
}

size_t MemoryRegistry::size() const {
  std::shared_lock lock(mu_);
  return regions_.size();
}

}  // namespace te
