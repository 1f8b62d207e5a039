// The address-vector cache's bookkeeping (address_cache.h): lookups, least recently used
// eviction and the retirement of forgotten entries.
#include "address_cache.h"

namespace te::fabric {

AddressCache::Addr AddressCache::touch(const Raw& raw) {
  auto it = map_.find(raw);
  if (it == map_.end()) return kNone;
  lru_.splice(lru_.begin(), lru_, it->second.lru);  // most recently used
  return it->second.fa;
}

AddressCache::Addr AddressCache::find(const Raw& raw) const {
  auto it = map_.find(raw);
  return it == map_.end() ? kNone : it->second.fa;
}

size_t AddressCache::insert(const Raw& raw, Addr fa, const std::set<Addr>& pinned, int64_t now) {
  lru_.push_front(raw);
  map_[raw] = Entry{fa, lru_.begin()};
  return map_.size() > max_entries ? evict(fa, pinned, now) : 0;
}

size_t AddressCache::evict(Addr keep, const std::set<Addr>& pinned, int64_t now) {
  // Evicted entries retire at the next scan: no grace, as nothing resolved them lately (they
  // are the least recently used); the rail still keeps any a message or operation uses.
  const int64_t due = now - kRetireGraceMs;
  size_t evicted = 0;
  auto it = lru_.end();
  while (map_.size() > max_entries && it != lru_.begin()) {
    --it;
    auto e = map_.find(*it);
    if (e == map_.end()) {  // (cannot happen: the list holds the map's keys)
      it = lru_.erase(it);
      continue;
    }
    if (e->second.fa == keep || pinned.count(e->second.fa)) continue;
    retiring_.emplace(e->second.fa, due);
    map_.erase(e);
    it = lru_.erase(it);
    ++evicted;
  }
  return evicted;
}

bool AddressCache::forget(const Raw& raw, int64_t now) {
  auto it = map_.find(raw);
  if (it == map_.end()) return false;
  retiring_.emplace(it->second.fa, now);
  lru_.erase(it->second.lru);
  map_.erase(it);
  return true;
}

std::set<AddressCache::Addr> AddressCache::mapped() const {
  std::set<Addr> out;
  for (auto& [raw, e] : map_) out.insert(e.fa);
  return out;
}

std::vector<AddressCache::Addr> AddressCache::due(int64_t now) {
  std::vector<Addr> out;
  const std::set<Addr> in_map = mapped();
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    if (in_map.count(it->first)) {
      it = retiring_.erase(it);
      continue;
    }
    if (now - it->second >= kRetireGraceMs) out.push_back(it->first);
    ++it;
  }
  return out;
}

std::vector<AddressCache::Addr> AddressCache::take_removable(const std::vector<Addr>& due, const std::set<Addr>& used) {
  std::vector<Addr> out;
  const std::set<Addr> in_map = mapped();
  for (Addr fa : due) {
    if (in_map.count(fa)) {
      retiring_.erase(fa);
      continue;
    }
    if (used.count(fa) || !retiring_.count(fa)) continue;
    retiring_.erase(fa);
    out.push_back(fa);
  }
  return out;
}

}  // namespace te::fabric
