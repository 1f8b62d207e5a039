#include "pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace te::barex {

namespace {
std::mutex g_mu;
Pool* g_pool = nullptr;

std::string human(uint64_t b) {
  char s[64];
  if (b >= (1ull << 30))
    snprintf(s, sizeof s, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20))
    snprintf(s, sizeof s, "%.2f MiB", b / 1048576.0);
  else
    snprintf(s, sizeof s, "%llu B", static_cast<unsigned long long>(b));
  return s;
}
}  // namespace

Pool::Pool(uint64_t base, uint64_t size) : base_(base), size_(size) { free_[base] = size; }

Status Pool::instance(uint64_t size, Pool** out, std::string* err) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_pool) {
    if (size > g_pool->size_) {
      *err = "the barex pool of this process already exists with " + human(g_pool->size_) + ", smaller than the " +
             human(size) +
             " asked for; the pool is created once per process (set TE_BAREX_POOL_SIZE before the first use)";
      return TE_INVALID_ARGUMENT;
    }
    *out = g_pool;
    return TE_OK;
  }
  if (size == 0 || size % 4096 != 0) {
    *err = "the barex pool size must be a positive multiple of 4096 bytes";
    return TE_INVALID_ARGUMENT;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    *err = "cannot map the barex pool of " + human(size) + ": " + strerror(errno);
    return TE_OUT_OF_MEMORY;
  }
  g_pool = new Pool(reinterpret_cast<uint64_t>(p), size);
  *out = g_pool;
  return TE_OK;
}

Pool* Pool::existing() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_pool;
}

Status Pool::allocate(uint64_t bytes, uint64_t* addr, std::string* err) {
  if (bytes == 0) {
    *err = "cannot allocate 0 bytes from the barex pool";
    return TE_INVALID_ARGUMENT;
  }
  if (bytes > size_) {
    *err = "cannot allocate " + human(bytes) + ": larger than the whole barex pool (" + human(size_) +
           ", TE_BAREX_POOL_SIZE)";
    return TE_POOL_EXHAUSTED;
  }
  uint64_t need = (bytes + kAlign - 1) & ~(kAlign - 1);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    uint64_t a = it->first;
    uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest) free_[a + need] = rest;
    used_[a] = need;
    used_bytes_ += need;
    *addr = a;
    return TE_OK;
  }
  uint64_t largest = 0;
  for (auto& f : free_) largest = f.second > largest ? f.second : largest;
  *err = "barex pool exhausted: " + human(bytes) + " asked, " + human(size_ - used_bytes_) + " free of " +
         human(size_) + " (largest free block " + human(largest) + ", " + std::to_string(used_.size()) +
         " allocations); free memory or raise TE_BAREX_POOL_SIZE";
  return TE_POOL_EXHAUSTED;
}

Status Pool::free(uint64_t addr, std::string* err) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_.find(addr);
  if (it == used_.end()) {
    char s[96];
    snprintf(s, sizeof s, "0x%llx is not the start of a barex pool allocation", static_cast<unsigned long long>(addr));
    *err = s;
    return TE_MEMORY_NOT_REGISTERED;
  }
  uint64_t len = it->second;
  used_.erase(it);
  used_bytes_ -= len;
  auto next = free_.lower_bound(addr);
  if (next != free_.end() && addr + len == next->first) {
    len += next->second;
    free_.erase(next);
  }
  auto ins = free_.emplace(addr, len).first;
  if (ins != free_.begin()) {
    auto prev = std::prev(ins);
    if (prev->first + prev->second == addr) {
      prev->second += ins->second;
      free_.erase(ins);
    }
  }
  return TE_OK;
}

bool Pool::contains(uint64_t addr, uint64_t len) const {
  return addr >= base_ && len <= size_ && addr - base_ <= size_ - len;
}

void Pool::stats(uint64_t* used, uint64_t* allocations) const {
  std::lock_guard<std::mutex> lock(mu_);
  *used = used_bytes_;
  *allocations = used_.size();
}

}  // namespace te::barex
