// Pool memory on both sides (see pools.h).
#include "pools.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif

namespace teshm {

static std::atomic<uint64_t> g_peer_pools{0};

uint64_t peer_pools_mapped() { return g_peer_pools.load(); }

LocalPool::~LocalPool() {
  if (base) munmap(reinterpret_cast<void*>(base), static_cast<size_t>(len));
  if (fd >= 0) close(fd);
}

te::Status LocalPools::allocate(uint64_t len, std::shared_ptr<LocalPool>* out, std::string* err) {
  if (len == 0) {
    *err = "cannot allocate 0 bytes";
    return te::TE_INVALID_ARGUMENT;
  }
  auto p = std::make_shared<LocalPool>();
  p->fd = memfd_create("te-shm-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (p->fd < 0) {
    *err = std::string("memfd_create: ") + std::strerror(errno);
    return te::TE_OUT_OF_MEMORY;
  }
  if (ftruncate(p->fd, static_cast<off_t>(len)) != 0 || fcntl(p->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    *err = std::string("sizing and sealing the pool memfd: ") + std::strerror(errno);
    return te::TE_OUT_OF_MEMORY;
  }
  void* m = mmap(nullptr, static_cast<size_t>(len), PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (m == MAP_FAILED) {
    *err = std::string("mapping the pool: ") + std::strerror(errno);
    return te::TE_OUT_OF_MEMORY;
  }
  p->base = reinterpret_cast<uint64_t>(m);
  p->len = len;
  madvise(m, static_cast<size_t>(len), MADV_HUGEPAGE);  // a hint: shmem follows shmem_enabled
  std::lock_guard<std::mutex> lock(mu_);
  p->id = next_id_++;
  by_base_[p->base] = p;
  *out = std::move(p);
  return te::TE_OK;
}

std::shared_ptr<LocalPool> LocalPools::release(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return nullptr;
  auto p = std::move(it->second);
  by_base_.erase(it);
  return p;
}

std::shared_ptr<LocalPool> LocalPools::find(uint64_t addr, uint64_t len) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_base_.empty()) return nullptr;
  auto it = by_base_.upper_bound(addr);
  if (it == by_base_.begin()) return nullptr;
  const auto& p = std::prev(it)->second;
  bool inside = addr - p->base <= p->len && len <= p->len - (addr - p->base);
  return inside ? p : nullptr;
}

PeerPool::~PeerPool() {
  if (!map) return;
  munmap(map, static_cast<size_t>(len));
  g_peer_pools.fetch_sub(1);
}

te::Status map_peer_pool(int fd, uint64_t base, uint64_t ad_len, std::shared_ptr<PeerPool>* out, std::string* why) {
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    *why = "the pool's descriptor is not a memfd sealed against shrinking";
    return te::TE_BAD_FRAME;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < ad_len) {
    *why = "the pool's memfd is shorter than the pool it announces";
    return te::TE_BAD_FRAME;
  }
  void* m = mmap(nullptr, static_cast<size_t>(ad_len), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    *why = std::string("mapping the initiator's pool: ") + std::strerror(errno);
    return te::TE_OUT_OF_MEMORY;
  }
  auto p = std::make_shared<PeerPool>();
  p->base = base;
  p->len = ad_len;
  p->map = static_cast<uint8_t*>(m);
  g_peer_pools.fetch_add(1);
  *out = std::move(p);
  return te::TE_OK;
}

}  // namespace teshm
