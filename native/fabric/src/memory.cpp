// Registration: a key per rail for every region (or the barex pool's keys for memory
// inside the pool), the published table peers read, and revocation at unregister.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"
#include "select.h"

namespace te::fabric {

Status Transport::register_memory(uint64_t addr, uint64_t len, bool remote, std::vector<uint64_t>* keys, uint64_t* base,
                                  std::string* err) {
  Impl& m = *impl_;
  if (m.closed.load()) return *err = "transport is closed", TE_ABORTED;
  bool in_pool = m.pool && m.pool->contains(addr, len);
  if (m.pool && m.opt.pool_strict && !in_pool) {
    *err = "memory at " + hex(addr) + " (" + std::to_string(len) +
           " bytes) lies outside the barex pool: barex transfers only memory allocated from its pre-registered pool "
           "(allocate() from @te/barex); set allowExternalMemory (TE_BAREX_ALLOW_EXTERNAL=1) to register other memory "
           "individually, at the per-buffer registration cost the pool avoids";
    return TE_INVALID_ARGUMENT;
  }
  Status s = m.registry.add(addr, len, remote);
  if (s == TE_MEMORY_OVERLAP) return *err = "memory overlaps a registered region", s;
  if (s != TE_OK) return *err = "cannot register an empty or wrapping range", s;
  if (in_pool) {
    *keys = m.pool_keys;
    *base = m.pool->base();
  } else {
    MrEntry e;
    e.addr = addr;
    e.len = len;
    uint64_t access = FI_READ | FI_WRITE | FI_SEND | FI_RECV | (remote ? FI_REMOTE_READ | FI_REMOTE_WRITE : 0);
    for (auto& r : m.rails) {
      fid_mr* mr = nullptr;
      uint64_t key = r->prov_key ? 0 : m.next_key++;
      int rc = fi_mr_reg(r->domain, reinterpret_cast<void*>(addr), len, access, 0, key, 0, &mr, nullptr);
      if (!rc && r->mr_endpoint) {
        rc = fi_mr_bind(mr, &r->ep->fid, 0);
        if (!rc) rc = fi_mr_enable(mr);
      }
      if (rc) {
        if (mr) fi_close(&mr->fid);
        for (fid_mr* x : e.mrs) fi_close(&x->fid);
        m.registry.remove(addr);
        *err = "fi_mr_reg of " + std::to_string(len) + " bytes at " + hex(addr) + " failed on " + r->pub.provider + "/" +
               r->pub.domain + ": " + fi_error(rc);
        return rc == -FI_ENOMEM ? TE_OUT_OF_MEMORY : TE_INTERNAL;
      }
      e.mrs.push_back(mr);
      keys->push_back(fi_mr_key(mr));
    }
    *base = addr;
    std::unique_lock<std::shared_mutex> l(m.mr_mu);
    m.mrs[addr] = std::move(e);
  }
  if (remote) {
    std::lock_guard<std::mutex> l(m.pub_mu);
    m.published[addr] = Published{len, *base, *keys};
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
  {
    std::unique_lock<std::shared_mutex> l(m.mr_mu);
    auto it = m.mrs.find(addr);
    if (it != m.mrs.end() && !(m.pool && addr == m.pool->base() && it->second.len == m.pool->size())) {
      for (fid_mr* mr : it->second.mrs) fi_close(&mr->fid);  // the key stops working at the provider
      m.mrs.erase(it);
    }
  }
  if (was_published && !m.closed.load() && !m.rails.empty()) {
    std::vector<std::vector<uint8_t>> to;
    {
      std::lock_guard<std::mutex> l(m.known_mu);
      for (auto& [a, e] : m.known) to.push_back(a);
    }
    // Tell every peer that said hello, and wait (bounded) until each dropped the region
    // from its cache: a pool key stays valid, so a stale cache must not outlive this call.
    auto w = std::make_shared<RevokeWait>();
    uint64_t req = m.next_req++;
    {
      std::lock_guard<std::mutex> l(m.pending_mu);
      m.revokes[req] = w;
    }
    for (auto& a : to) {
      fi_addr_t d = m.rails[0]->address_of(a, nullptr);
      if (d == FI_ADDR_NOTAVAIL) continue;
      wire::Header h = m.header(0, wire::REVOKE, 0);
      h.arg = addr;
      h.req_id = req;
      {
        std::lock_guard<std::mutex> l(w->mu);
        ++w->left;
      }
      m.send_ctrl(0, nullptr, d, h, {});
    }
    {
      std::unique_lock<std::mutex> l(w->mu);
      w->cv.wait_for(l, std::chrono::milliseconds(std::min(m.opt.connect_timeout_ms, 1000)), [&] { return w->left <= 0; });
    }
    std::lock_guard<std::mutex> l(m.pending_mu);
    m.revokes.erase(req);
  }
  return TE_OK;
}

Status Transport::pool_alloc(uint64_t bytes, uint64_t* addr, std::string* err) {
  Impl& m = *impl_;
  if (!m.pool) return *err = "this transport has no pool", TE_INVALID_ARGUMENT;
  return m.pool->allocate(bytes, addr, err);
}

Status Transport::pool_free(uint64_t addr, std::string* err) {
  Impl& m = *impl_;
  if (!m.pool) return *err = "this transport has no pool", TE_INVALID_ARGUMENT;
  if (m.registry.check(addr, 1, false) == TE_OK) {
    *err = "memory at " + hex(addr) + " is still registered: unregister it before freeing it";
    return TE_INVALID_ARGUMENT;
  }
  return m.pool->free(addr, err);
}

void Transport::pool_stats(uint64_t* base, uint64_t* size, uint64_t* used, uint64_t* allocations) const {
  Impl& m = *impl_;
  *base = *size = *used = *allocations = 0;
  if (!m.pool) return;
  *base = m.pool->base();
  *size = m.pool->size();
  m.pool->stats(used, allocations);
}

}  // namespace te::fabric
