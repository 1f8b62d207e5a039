// Registration: a random key per rail for every region (arena memory too: a plugin's arena
// is registered once for local access, and a region in it that peers may access gets its own
// registration, so freeing and reusing arena memory never leaves an old key writable), the
// published table peers read, and revocation at unregister.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "impl.h"
#include "select.h"

namespace te::fabric {

Status Transport::register_memory(uint64_t addr, uint64_t len, bool remote, std::vector<uint64_t>* keys, uint64_t* base,
                                  std::string* err) {
  Impl& m = *impl_;
  std::shared_lock<std::shared_mutex> life(m.life_mu);
  if (m.closed.load()) return *err = "transport is closed", TE_ABORTED;
  bool in_pool = m.in_arena(addr, len);
  if (m.opt.arena_size && !m.opt.outside_arena.empty() && !in_pool) {
    *err = "memory at " + hex(addr) + " (" + std::to_string(len) + " bytes) lies outside " + m.opt.outside_arena;
    return TE_INVALID_ARGUMENT;
  }
  Status s = m.registry.add(addr, len, remote);
  if (s == TE_MEMORY_OVERLAP) return *err = "memory overlaps a registered region", s;
  if (s != TE_OK) return *err = "cannot register an empty or wrapping range", s;
  // Pool memory without remote access needs no registration of its own: the pool's
  // local registration gives its descriptors.
  if (!(in_pool && !remote)) {
    MrEntry e;
    e.addr = addr;
    e.len = len;
    uint64_t access = FI_READ | FI_WRITE | FI_SEND | FI_RECV | (remote ? FI_REMOTE_READ | FI_REMOTE_WRITE : 0);
    s = m.register_on_rails(addr, len, access, &e.mrs, err);
    if (s != TE_OK) {
      m.registry.remove(addr);
      return s;
    }
    for (fid_mr* mr : e.mrs) keys->push_back(fi_mr_key(mr));
    std::unique_lock<std::shared_mutex> l(m.mr_mu);
    m.mrs[addr] = std::move(e);
  }
  *base = addr;
  if (remote) {
    std::lock_guard<std::mutex> l(m.pub_mu);
    m.published[addr] = Published{len, *base, *keys};
  }
  return TE_OK;
}

Status Transport::Impl::register_on_rails(uint64_t addr, uint64_t len, uint64_t access, std::vector<fid_mr*>* out,
                                          std::string* err) {
  // Keys are random where te chooses them: a peer cannot guess another region's key from
  // its own, and a key of an unregistered region is unlikely to come back.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  for (auto& r : rails) {
    fid_mr* mr = nullptr;
    int rc = -FI_ENOKEY;
    for (int attempt = 0; attempt < 8 && rc == -FI_ENOKEY; ++attempt) {
      uint64_t key = 0;
      if (!r->prov_key) {
        key = rng();
        size_t bytes = r->pub.key_size;
        if (bytes > 0 && bytes < 8) key &= (1ull << (8 * bytes)) - 1;
        if (key == 0) key = 1;
      }
      rc = fi_mr_reg(r->domain, reinterpret_cast<void*>(addr), len, access, 0, key, 0, &mr, nullptr);
    }
    if (!rc && r->mr_endpoint) {
      rc = fi_mr_bind(mr, &r->ep->fid, 0);
      if (!rc) rc = fi_mr_enable(mr);
    }
    if (rc) {
      if (mr) fi_close(&mr->fid);
      for (fid_mr* x : *out) fi_close(&x->fid);
      out->clear();
      *err = "fi_mr_reg of " + std::to_string(len) + " bytes at " + hex(addr) + " failed on " + r->pub.provider + "/" +
             r->pub.domain + ": " + fi_error(rc);
      return rc == -FI_ENOMEM ? TE_OUT_OF_MEMORY : TE_INTERNAL;
    }
    out->push_back(mr);
  }
  return TE_OK;
}

Status Transport::unregister_memory(uint64_t addr, std::string* err) {
  Impl& m = *impl_;
  Status s = m.registry.remove(addr);  // waits for in-flight operations on it
  if (s != TE_OK) return *err = "no registered memory starts at " + hex(addr), s;
  bool was_published;
  {
    std::lock_guard<std::mutex> l(m.pub_mu);
    was_published = m.published.erase(addr) > 0;
  }
  // Held through the revocation too: it posts on rail 0's address vector and endpoint, which
  // close() closes, so close() waits for it (bounded: a silent peer gets 1 s).
  std::shared_lock<std::shared_mutex> life(m.life_mu);  // close() closes every region itself
  if (was_published && !m.closed.load() && !m.rails.empty()) m.revoke(addr);
  std::unique_lock<std::shared_mutex> l(m.mr_mu);
  auto it = m.mrs.find(addr);
  if (it != m.mrs.end()) {
    for (fid_mr* mr : it->second.mrs) fi_close(&mr->fid);  // the keys stop working at the provider
    m.mrs.erase(it);
  }
  return TE_OK;
}

// Tells every peer that said hello to drop the region, and waits until each answered,
// which it does once its operations into the region finished. A peer that does not
// answer in time is taken for dead: it is forgotten (so later unregistrations do not
// wait for it) and its connection is dropped; if it was only slow, the keys closed right
// after this refuse whatever it still posts.
void Transport::Impl::revoke(uint64_t addr) {
  auto w = std::make_shared<RevokeWait>();
  {
    std::lock_guard<std::mutex> l(known_mu);
    for (auto& [a, seen] : known) w->waiting.insert(a);
  }
  if (w->waiting.empty()) return;
  uint64_t req = next_req++;
  {
    std::lock_guard<std::mutex> l(pending_mu);
    revokes[req] = w;
  }
  std::vector<std::vector<uint8_t>> to(w->waiting.begin(), w->waiting.end());
  for (auto& a : to) {
    fi_addr_t d = rails[0]->address_of(a, nullptr);
    if (d == FI_ADDR_NOTAVAIL) {
      std::lock_guard<std::mutex> l(w->mu);
      w->waiting.erase(a);
      continue;
    }
    wire::Header h = header(0, wire::REVOKE, 0);
    h.arg = addr;
    h.req_id = req;
    send_ctrl_to(0, a, h, {});
  }
  std::set<std::vector<uint8_t>> silent;
  {
    std::unique_lock<std::mutex> l(w->mu);
    w->cv.wait_for(l, std::chrono::milliseconds(std::min(opt.connect_timeout_ms, 1000)),
                   [&] { return w->waiting.empty(); });
    silent = w->waiting;
  }
  {
    std::lock_guard<std::mutex> l(pending_mu);
    revokes.erase(req);
  }
  if (silent.empty()) return;
  {
    std::lock_guard<std::mutex> l(known_mu);
    for (auto& a : silent) known.erase(a);
  }
  for (auto& a : silent) rails[0]->forget_address(a);
}

bool Transport::is_registered(uint64_t addr) const { return impl_->registry.check(addr, 1, false) == TE_OK; }

}  // namespace te::fabric
