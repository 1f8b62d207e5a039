// A rail's address-vector cache: peers' raw addresses inserted into the AV on first use,
// evicted when the AV is full, and retired only after a grace period (an operation may
// still name an address the peer side gave up).
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <type_traits>

#include "impl.h"
#include "select.h"

namespace te::fabric {

// The cache keeps AV entries as plain integers and FI_ADDR_NOTAVAIL as its "none".
static_assert(std::is_same_v<fi_addr_t, AddressCache::Addr> && FI_ADDR_NOTAVAIL == AddressCache::kNone);

fi_addr_t Rail::address_of(const std::vector<uint8_t>& raw, std::string* err) {
  std::unique_lock<std::mutex> l(av_mu);
  fi_addr_t known = addresses.touch(raw);
  if (known != FI_ADDR_NOTAVAIL) return known;
  // fi_av_insert reads the provider's fixed address length from `raw`: an address of another
  // length (a peer's message may name any) is refused before the provider sees it.
  if (!address_fits(raw)) {
    if (err)
      *err = "refused a " + std::to_string(raw.size()) + "-byte address on " + pub.provider + "/" + pub.domain +
             " (its addresses are " + std::to_string(pub.addr.size()) + " bytes)";
    return FI_ADDR_NOTAVAIL;
  }
  // At the bound, the entries peers opened here use stay (senders we only answer go first).
  // Their set is read without av_mu (peers_mu is never taken inside it elsewhere), before the
  // insert: the insert and the eviction then happen under one hold of av_mu, so no other
  // thread ever sees the map past its bound.
  std::set<fi_addr_t> pinned;
  if (addresses.full()) {
    l.unlock();
    pinned = owner->addresses_in_use(index);
    l.lock();
    fi_addr_t again = addresses.touch(raw);
    if (again != FI_ADDR_NOTAVAIL) return again;  // inserted by another thread meanwhile
  }
  fi_addr_t fa = FI_ADDR_NOTAVAIL;
  int rc = fi_av_insert(av, raw.data(), 1, &fa, 0, nullptr);
  if (rc != 1) {
    if (err)
      *err = "fi_av_insert failed on " + pub.provider + "/" + pub.domain + ": " + fi_error(rc < 0 ? rc : -FI_EINVAL);
    return FI_ADDR_NOTAVAIL;
  }
  if (addresses.insert(raw, fa, pinned, now_ms()) > 0) has_retiring.store(true, std::memory_order_release);
  return fa;
}

bool Rail::address_fits(const std::vector<uint8_t>& raw) const {
  if (raw.empty() || raw.size() != pub.addr.size()) return false;
  // Socket addresses: the provider sizes them by their family, so it must be this rail's.
  const uint32_t fmt = info ? info->addr_format : 0;
  if ((fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6) && raw.size() >= 2 &&
      memcmp(raw.data(), pub.addr.data(), 2) != 0)
    return false;
  return true;
}

fi_addr_t Rail::lookup_address(const std::vector<uint8_t>& raw) {
  std::lock_guard<std::mutex> l(av_mu);
  return addresses.find(raw);
}

void Rail::forget_address(const std::vector<uint8_t>& raw) {
  // Removing the entry makes providers with connections under the AV (ofi_rxm) drop the
  // broken connection, so the next insert of the address builds a new one. The removal
  // itself waits for the rail thread (retire_addresses): the address may still be in use.
  std::lock_guard<std::mutex> l(av_mu);
  if (addresses.forget(raw, now_ms())) has_retiring.store(true, std::memory_order_release);
}

void Rail::retire_addresses() {
  if (!has_retiring.load(std::memory_order_acquire)) return;
  const int64_t t = now_ms();
  if (t - last_retire_scan < 50) return;
  last_retire_scan = t;
  std::vector<fi_addr_t> due;
  {
    // (An entry inserted again meanwhile is in use again, and retired anew when it is
    // forgotten again.)
    std::lock_guard<std::mutex> l(av_mu);
    due = addresses.due(t);
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
    for (fi_addr_t fa : addresses.take_removable(due, used)) fi_av_remove(av, &fa, 1, 0);
  }
  std::lock_guard<std::mutex> l(av_mu);
  has_retiring.store(!addresses.retiring_empty(), std::memory_order_release);
}

}  // namespace te::fabric
