// A rail's address-vector cache: peers' raw addresses inserted into the AV on first use,
// evicted when the AV is full, and retired only after a grace period (an operation may
// still name an address the peer side gave up).
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <set>

#include "impl.h"
#include "select.h"

namespace te::fabric {


fi_addr_t Rail::address_of(const std::vector<uint8_t>& raw, std::string* err) {
  std::unique_lock<std::mutex> l(av_mu);
  auto it = av_map.find(raw);
  if (it != av_map.end()) {
    av_lru.splice(av_lru.begin(), av_lru, it->second.lru);  // most recently used
    return it->second.fa;
  }
  // fi_av_insert reads the provider's fixed address length from `raw`: an address of another
  // length (a peer's message may name any) is refused before the provider sees it.
  if (!address_fits(raw)) {
    if (err) *err = "refused a " + std::to_string(raw.size()) + "-byte address on " + pub.provider + "/" + pub.domain +
                    " (its addresses are " + std::to_string(pub.addr.size()) + " bytes)";
    return FI_ADDR_NOTAVAIL;
  }
  // At the bound, the entries peers opened here use stay (senders we only answer go first).
  // Their set is read without av_mu (peers_mu is never taken inside it elsewhere), before the
  // insert: the insert and the eviction then happen under one hold of av_mu, so no other
  // thread ever sees the map past its bound.
  std::set<fi_addr_t> pinned;
  if (av_map.size() >= max_av_entries) {
    l.unlock();
    pinned = owner->addresses_in_use(index);
    l.lock();
    auto again = av_map.find(raw);
    if (again != av_map.end()) {  // inserted by another thread meanwhile
      av_lru.splice(av_lru.begin(), av_lru, again->second.lru);
      return again->second.fa;
    }
  }
  fi_addr_t fa = FI_ADDR_NOTAVAIL;
  int rc = fi_av_insert(av, raw.data(), 1, &fa, 0, nullptr);
  if (rc != 1) {
    if (err) *err = "fi_av_insert failed on " + pub.provider + "/" + pub.domain + ": " + fi_error(rc < 0 ? rc : -FI_EINVAL);
    return FI_ADDR_NOTAVAIL;
  }
  av_lru.push_front(raw);
  av_map[raw] = AvEntry{fa, av_lru.begin()};
  if (av_map.size() > max_av_entries) evict_addresses(fa, pinned);
  return fa;
}


void Rail::evict_addresses(fi_addr_t keep, const std::set<fi_addr_t>& pinned) {
  // Evicted entries retire at the next scan: no grace, as nothing resolved them lately (they
  // are the least recently used); retire_addresses still keeps any a message or operation uses.
  const int64_t due = now_ms() - kRetireGraceMs;
  auto it = av_lru.end();
  while (av_map.size() > max_av_entries && it != av_lru.begin()) {
    --it;
    auto e = av_map.find(*it);
    if (e == av_map.end()) {  // (cannot happen: the list holds the map's keys)
      it = av_lru.erase(it);
      continue;
    }
    if (e->second.fa == keep || pinned.count(e->second.fa)) continue;
    retiring.emplace(e->second.fa, due);
    av_map.erase(e);
    it = av_lru.erase(it);
    has_retiring.store(true, std::memory_order_release);
  }
}


bool Rail::address_fits(const std::vector<uint8_t>& raw) const {
  if (raw.empty() || raw.size() != pub.addr.size()) return false;
  // Socket addresses: the provider sizes them by their family, so it must be this rail's.
  const uint32_t fmt = info ? info->addr_format : 0;
  if ((fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6) && raw.size() >= 2 && memcmp(raw.data(), pub.addr.data(), 2) != 0) return false;
  return true;
}


fi_addr_t Rail::lookup_address(const std::vector<uint8_t>& raw) {
  std::lock_guard<std::mutex> l(av_mu);
  auto it = av_map.find(raw);
  return it == av_map.end() ? FI_ADDR_NOTAVAIL : it->second.fa;
}


void Rail::forget_address(const std::vector<uint8_t>& raw) {
  // Removing the entry makes providers with connections under the AV (ofi_rxm) drop the
  // broken connection, so the next insert of the address builds a new one. The removal
  // itself waits for the rail thread (retire_addresses): the address may still be in use.
  std::lock_guard<std::mutex> l(av_mu);
  auto it = av_map.find(raw);
  if (it == av_map.end()) return;
  retiring.emplace(it->second.fa, now_ms());
  av_lru.erase(it->second.lru);
  av_map.erase(it);
  has_retiring.store(true, std::memory_order_release);
}


void Rail::retire_addresses() {
  if (!has_retiring.load(std::memory_order_acquire)) return;
  const int64_t t = now_ms();
  if (t - last_retire_scan < 50) return;
  last_retire_scan = t;
  std::vector<fi_addr_t> due;
  {
    std::lock_guard<std::mutex> l(av_mu);
    std::set<fi_addr_t> mapped;
    for (auto& [raw, e] : av_map) mapped.insert(e.fa);
    for (auto it = retiring.begin(); it != retiring.end();) {
      // Inserted again meanwhile (a provider may hand out the same entry): in use again,
      // and retired anew when it is forgotten again.
      if (mapped.count(it->first)) {
        it = retiring.erase(it);
        continue;
      }
      if (t - it->second >= kRetireGraceMs) due.push_back(it->first);
      ++it;
    }
  }
  if (!due.empty()) {
    // What messages, operations and open peers use, gathered once for every due entry.
    std::set<fi_addr_t> used = owner->addresses_in_use(index);
    {
      std::lock_guard<std::mutex> l(q_mu);
      for (const CtrlMsg& m : ctrl)
        if (m.to.empty()) used.insert(m.dest);
      for (const Op* op : live)
        if (op->kind != Op::RECV) used.insert(op->dest);
    }
    // Removed under av_mu, so no insert of the same address runs meanwhile; one inserted
    // again since the scan above is mapped again and stays.
    std::lock_guard<std::mutex> l(av_mu);
    std::set<fi_addr_t> mapped;
    for (auto& [raw, e] : av_map) mapped.insert(e.fa);
    for (fi_addr_t fa : due) {
      if (mapped.count(fa)) {
        retiring.erase(fa);
        continue;
      }
      if (used.count(fa) || !retiring.count(fa)) continue;
      fi_av_remove(av, &fa, 1, 0);
      retiring.erase(fa);
    }
  }
  std::lock_guard<std::mutex> l(av_mu);
  has_retiring.store(!retiring.empty(), std::memory_order_release);
}

}  // namespace te::fabric
