// te::fabric::Transport over libfabric: registration (keys per rail, mr_mode handled
// generically), peers (address vectors filled from their descriptors, hello on every
// rail), validation of every remote range against the peer's published table before
// posting, striping of slices over rails, deadlines/cancel, notifications.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"
#include "select.h"

namespace te::fabric {

namespace {

std::string hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o;
}

}  // namespace

// ---------------------------------------------------------------- Impl (rail threads)

wire::Header Transport::Impl::header(int rail, uint8_t type, uint64_t target_epoch) const {
  wire::Header h;
  h.type = type;
  h.rail = static_cast<uint16_t>(rail);
  h.sender_epoch = opt.epoch;
  h.target_epoch = target_epoch;
  h.sender_addr = rails[static_cast<size_t>(rail)]->pub.addr;
  return h;
}

void Transport::Impl::send_ctrl(int rail, const std::shared_ptr<Peer>& peer, fi_addr_t dest, wire::Header h,
                                const std::vector<uint8_t>& body, std::shared_ptr<Batch> batch) {
  CtrlMsg m;
  m.peer = peer;
  m.dest = dest;
  wire::put_header(m.bytes, h);
  m.bytes.insert(m.bytes.end(), body.begin(), body.end());
  m.batch = std::move(batch);
  m.deadline = now_ms() + std::max(opt.connect_timeout_ms, 1000);
  rails[static_cast<size_t>(rail)]->push_ctrl(std::move(m));
}

void* Transport::Impl::local_desc(int rail, uint64_t addr) {
  std::shared_lock<std::shared_mutex> l(mr_mu);
  auto it = mrs.upper_bound(addr);
  if (it == mrs.begin()) return nullptr;
  --it;
  if (addr - it->second.addr >= it->second.len) return nullptr;
  fid_mr* mr = it->second.mrs[static_cast<size_t>(rail)];
  return mr ? fi_mr_desc(mr) : nullptr;
}

void Transport::Impl::finish_slice(const std::shared_ptr<Batch>& b, uint32_t req, int32_t status, const std::string& msg) {
  if (status != TE_OK) {
    int32_t zero = 0;
    b->statuses[req].compare_exchange_strong(zero, status);
    if (!msg.empty()) b->fail_message(msg);
  }
  b->req_left[req].fetch_sub(1);
  if (b->slices_left.fetch_sub(1) == 1) data_done(b);
}

void Transport::Impl::data_done(const std::shared_ptr<Batch>& b) {
  bool ok = b->cancel_status.load() == 0;
  for (size_t i = 0; ok && i < b->n; ++i) ok = b->statuses[i].load() == 0;
  if (b->has_notify && ok && !b->done.load()) {
    auto p = b->peer;
    if (p->state.load() >= 2) {
      b->batch_status.store(TE_CONNECTION_LOST);
      b->fail_message("notification not sent: connection to \"" + p->name + "\" lost");
      complete(b);
      return;
    }
    wire::Header h = header(0, wire::NOTIFY, p->epoch);
    std::vector<uint8_t> body;
    wire::put_u16(body, static_cast<uint16_t>(opt.segment_name.size()));
    wire::put_bytes(body, opt.segment_name.data(), opt.segment_name.size());
    wire::put_u32(body, static_cast<uint32_t>(b->notify.size()));
    wire::put_bytes(body, b->notify.data(), b->notify.size());
    send_ctrl(0, p, p->dest[0], h, body, b);
    return;
  }
  complete(b);
}

void Transport::Impl::complete(const std::shared_ptr<Batch>& b) {
  if (b->done.exchange(true)) return;
  auto out = std::make_unique<BatchOutcome>();
  int32_t cancel = b->cancel_status.load();
  out->statuses.resize(b->n);
  for (size_t i = 0; i < b->n; ++i) {
    int32_t st = b->statuses[i].load();
    if (st == 0 && (b->req_left[i].load() > 0 || (cancel && !b->dispatched.load()))) st = cancel ? cancel : TE_ABORTED;
    out->statuses[i] = st;
    if (st == 0) out->bytes += b->lengths[i];
  }
  out->status = cancel ? cancel : b->batch_status.load();
  {
    std::lock_guard<std::mutex> l(b->err_mu);
    out->message = b->error;
  }
  {
    std::lock_guard<std::mutex> l(batches_mu);
    batches.erase(b->id);
    outcomes[b->id] = std::move(out);
  }
  Event e;
  e.kind = Event::BATCH;
  e.id = b->id;
  sink(std::move(e));
}

void Transport::Impl::peer_broken(const std::shared_ptr<Peer>& p, const std::string& why) {
  int s = p->state.load();
  if (s >= 2) return;
  {
    std::lock_guard<std::mutex> l(p->mu);
    p->broken_reason = "connection to \"" + p->name + "\" lost: " + why;
  }
  p->state.store(2);
  // A later openPeer must build a new connection: forget the address mapping.
  for (size_t r = 0; r < rails.size(); ++r) {
    int pr = p->peer_rail[r];
    rails[r]->forget_address(p->address.rails[static_cast<size_t>(pr)]);
  }
}

void Transport::Impl::fail_pending(uint64_t req, Pending& pd, int32_t status, const std::string& why) {
  (void)req;
  if (pd.kind == Pending::HELLO) {
    if (!pd.peer->open_reported.exchange(true)) {
      if (pd.peer->state.load() < 2) pd.peer->state.store(2);
      {
        std::lock_guard<std::mutex> l(pd.peer->mu);
        pd.peer->broken_reason = why;
      }
      Event e;
      e.kind = Event::OPEN;
      e.id = pd.peer->id;
      e.status = status;
      e.text = why;
      sink(std::move(e));
    }
  } else if (pd.kind == Pending::TABLE) {
    std::vector<std::shared_ptr<Batch>> parked;
    {
      std::lock_guard<std::mutex> l(pd.peer->mu);
      pd.peer->table_pending = false;
      parked.swap(pd.peer->parked);
    }
    for (auto& b : parked) dispatch(b, false);
  } else if (pd.kind == Pending::CHECK) {
    auto it = checks.find(pd.check_id);
    if (it != checks.end()) {
      it->second.ok = false;
      it->second.rails.push_back("{\"rail\":" + std::to_string(pd.rail) + ",\"ok\":false,\"error\":\"" + json_escape(why) + "\"}");
      if (--it->second.left == 0) {
        Event e;
        e.kind = Event::CHECK;
        e.id = pd.check_id;
        e.status = it->second.ok ? 0 : TE_PEER_UNREACHABLE;
        std::string rs;
        for (auto& x : it->second.rails) rs += (rs.empty() ? "" : ",") + x;
        e.text = "{\"healthy\":false,\"rails\":[" + rs + "]}";
        checks.erase(it);
        sink(std::move(e));
      }
    }
  }
}

void Transport::Impl::fail_hellos(const std::shared_ptr<Peer>& p, int32_t status, const std::string& why) {
  std::lock_guard<std::mutex> l(pending_mu);
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.kind == Pending::HELLO && it->second.peer == p) {
      Pending pd = it->second;
      it = pending.erase(it);
      fail_pending(0, pd, status, why);
    } else {
      ++it;
    }
  }
}

void Transport::Impl::housekeeping() {
  int64_t t = now_ms();
  // Requests without an answer.
  std::vector<std::pair<uint64_t, Pending>> expired;
  {
    std::lock_guard<std::mutex> l(pending_mu);
    for (auto it = pending.begin(); it != pending.end();) {
      if (t > it->second.deadline) {
        expired.emplace_back(it->first, it->second);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [id, pd] : expired) {
      if (getenv("TE_FABRIC_DEBUG")) fprintf(stderr, "[te_fabric %s] request %llu expired\n", opt.segment_name.c_str(), (unsigned long long)id);
      std::string why = "no answer from \"" + pd.peer->name + "\" on rail " + std::to_string(pd.rail) + " (" +
                        rails[static_cast<size_t>(pd.rail)]->pub.provider + ") within " + std::to_string(opt.connect_timeout_ms) + " ms";
      fail_pending(id, pd, TE_PEER_UNREACHABLE, why);
    }
  }
  // Cancelled batches whose in-flight operations did not finish within the grace period.
  std::vector<std::shared_ptr<Batch>> force;
  {
    std::lock_guard<std::mutex> l(batches_mu);
    for (auto it = cancelled.begin(); it != cancelled.end();) {
      if ((*it)->done.load()) {
        it = cancelled.erase(it);
      } else if (t - (*it)->cancel_at >= opt.cancel_grace_ms) {
        force.push_back(*it);
        it = cancelled.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& b : force) complete(b);
}

void Transport::Impl::request_table(const std::shared_ptr<Peer>& p) {
  uint64_t req = next_req++;
  {
    std::lock_guard<std::mutex> l(pending_mu);
    Pending pd;
    pd.kind = Pending::TABLE;
    pd.peer = p;
    pd.sent = now_ms();
    pd.deadline = pd.sent + opt.connect_timeout_ms;
    pending[req] = pd;
  }
  wire::Header h = header(0, wire::TABLE_REQ, p->epoch);
  h.req_id = req;
  send_ctrl(0, p, p->dest[0], h, {});
}

// Validates every request (local: registered here; remote: inside a region the peer
// published), then cuts the valid ones into slices striped over the rails.
void Transport::Impl::dispatch(const std::shared_ptr<Batch>& b, bool allow_refresh) {
  auto& p = b->peer;
  std::vector<std::vector<Slice>> per_rail(rails.size());
  std::vector<int32_t> st(b->n, 0);
  std::vector<const RemoteRegion*> reg(b->n, nullptr);
  {
    std::unique_lock<std::mutex> l(p->mu);
    bool miss = false;
    for (size_t i = 0; i < b->n; ++i) {
      uint64_t ra = b->remote[i], len = b->lengths[i];
      if (len == 0) continue;
      if (range_overflows(ra, len)) {
        st[i] = TE_ADDRESS_OUT_OF_RANGE;
        continue;
      }
      auto it = p->regions.upper_bound(ra);
      if (it != p->regions.begin()) {
        --it;
        const RemoteRegion& r = it->second;
        if (ra - r.addr < r.length) {
          if (range_within(r.addr, r.length, ra, len)) reg[i] = &r;
          else st[i] = TE_ADDRESS_OUT_OF_RANGE;
          continue;
        }
      }
      st[i] = TE_MEMORY_NOT_REGISTERED;
      miss = true;
    }
    if (miss && allow_refresh) {
      // The cached table may predate a registration: ask the peer for its table once.
      p->parked.push_back(b);
      bool send = !p->table_pending;
      p->table_pending = true;
      l.unlock();
      if (send) request_table(p);
      return;
    }
    uint64_t total = 0;
    size_t nr = rails.size();
    for (size_t i = 0; i < b->n; ++i) {
      uint64_t len = b->lengths[i];
      if (st[i] == 0 && len) {
        Status ls = registry.check(b->local[i], len, false);
        if (ls != TE_OK) st[i] = ls;
      }
      if (st[i] != 0) {
        b->statuses[i].store(st[i]);
        continue;
      }
      if (len == 0) continue;
      const RemoteRegion& r = *reg[i];
      uint64_t off = 0;
      uint32_t count = 0;
      while (off < len) {
        uint64_t sl = std::min<uint64_t>(opt.slice_size, len - off);
        size_t rail = static_cast<size_t>(p->rr.fetch_add(1) % nr);
        int prail = p->peer_rail[rail];
        bool virt = p->address.virt_addr[static_cast<size_t>(prail)];
        Slice s;
        s.batch = b;
        s.req = static_cast<uint32_t>(i);
        s.local = b->local[i] + off;
        s.len = sl;
        uint64_t ra = b->remote[i] + off;
        s.raddr = virt ? ra : ra - r.base;
        s.key = r.keys[static_cast<size_t>(prail) < r.keys.size() ? static_cast<size_t>(prail) : 0];
        s.write = b->ops[i] == 1;
        per_rail[rail].push_back(std::move(s));
        off += sl;
        ++count;
      }
      b->req_left[i].store(count);
      total += count;
    }
    b->slices_left.store(static_cast<int64_t>(total) + 1);  // +1 released below
    b->dispatched.store(true);
  }
  for (size_t r = 0; r < rails.size(); ++r)
    if (!per_rail[r].empty()) rails[r]->push_slices(std::move(per_rail[r]));
  if (b->slices_left.fetch_sub(1) == 1) data_done(b);
}

void Transport::Impl::on_message(Rail& r, const uint8_t* data, size_t len) {
  wire::Header h;
  size_t off = 0;
  if (!wire::get_header(data, len, &h, &off)) return;  // not ours / malformed: dropped
  if (getenv("TE_FABRIC_DEBUG")) fprintf(stderr, "[te_fabric %s] message type %d req %llu status %d\n", opt.segment_name.c_str(), h.type, (unsigned long long)h.req_id, h.status);
  wire::Reader rd{data, len, off};
  std::string err;
  switch (h.type) {
    case wire::HELLO: {
      fi_addr_t from = r.address_of(h.sender_addr, &err);
      if (from == FI_ADDR_NOTAVAIL) return;
      bool ok = h.target_epoch == opt.epoch;
      if (ok && r.index == 0) {
        std::lock_guard<std::mutex> l(known_mu);
        known[h.sender_addr] = h.sender_epoch;
      }
      wire::Header a = header(r.index, wire::HELLO_ACK, h.sender_epoch);
      a.req_id = h.req_id;
      a.status = ok ? TE_OK : TE_STALE_DESCRIPTOR;
      send_ctrl(r.index, nullptr, from, a, {});
      return;
    }
    case wire::HELLO_ACK: {
      Pending pd;
      {
        std::lock_guard<std::mutex> l(pending_mu);
        auto it = pending.find(h.req_id);
        if (it == pending.end()) return;
        pd = it->second;
        pending.erase(it);
        int64_t rtt = now_ms() - pd.sent;
        if (pd.kind == Pending::CHECK) {
          auto c = checks.find(pd.check_id);
          if (c == checks.end()) return;
          bool ok = h.status == TE_OK;
          c->second.ok = c->second.ok && ok;
          c->second.rails.push_back("{\"rail\":" + std::to_string(pd.rail) + ",\"ok\":" + (ok ? "true" : "false") +
                                    ",\"rttMs\":" + std::to_string(rtt) + (ok ? "" : ",\"error\":\"segment restarted (epoch changed)\"") + "}");
          if (--c->second.left == 0) {
            Event e;
            e.kind = Event::CHECK;
            e.id = pd.check_id;
            e.status = c->second.ok ? 0 : TE_STALE_DESCRIPTOR;
            std::string rs;
            for (auto& x : c->second.rails) rs += (rs.empty() ? "" : ",") + x;
            e.text = std::string("{\"healthy\":") + (c->second.ok ? "true" : "false") + ",\"rails\":[" + rs + "]}";
            checks.erase(c);
            sink(std::move(e));
          }
          return;
        }
      }
      if (pd.kind != Pending::HELLO) return;
      auto& p = pd.peer;
      if (h.status != TE_OK) {
        fail_pending(h.req_id, pd, h.status,
                     "segment \"" + p->name + "\" answered with epoch mismatch: the descriptor describes an earlier life of that segment (restarted)");
        return;
      }
      bool all;
      {
        std::lock_guard<std::mutex> l(p->mu);
        all = --p->hellos_left == 0;
      }
      if (all && p->state.load() == 0 && !p->open_reported.exchange(true)) {
        p->state.store(1);
        Event e;
        e.kind = Event::OPEN;
        e.id = p->id;
        sink(std::move(e));
      }
      return;
    }
    case wire::TABLE_REQ: {
      fi_addr_t from = r.address_of(h.sender_addr, &err);
      if (from == FI_ADDR_NOTAVAIL) return;
      std::vector<std::pair<uint64_t, Published>> table;
      {
        std::lock_guard<std::mutex> l(pub_mu);
        table.assign(published.begin(), published.end());
      }
      size_t nkeys = rails.size();
      size_t per = (wire::kMaxMessage - 1024) / (24 + 8 * nkeys);
      size_t i = 0;
      do {
        std::vector<uint8_t> body;
        size_t end = std::min(table.size(), i + per);
        wire::put_u16(body, static_cast<uint16_t>(nkeys));
        wire::put_u32(body, static_cast<uint32_t>(end - i));
        for (; i < end; ++i) {
          wire::put_u64(body, table[i].first);
          wire::put_u64(body, table[i].second.len);
          wire::put_u64(body, table[i].second.base);
          for (size_t k = 0; k < nkeys; ++k) wire::put_u64(body, k < table[i].second.keys.size() ? table[i].second.keys[k] : 0);
        }
        wire::Header a = header(r.index, wire::TABLE, h.sender_epoch);
        a.req_id = h.req_id;
        a.status = h.target_epoch == opt.epoch ? TE_OK : TE_STALE_DESCRIPTOR;
        a.flags = i >= table.size() ? wire::kLast : 0;
        send_ctrl(r.index, nullptr, from, a, body);
      } while (i < table.size());
      return;
    }
    case wire::TABLE: {
      Pending pd;
      {
        std::lock_guard<std::mutex> l(pending_mu);
        auto it = pending.find(h.req_id);
        if (it == pending.end() || it->second.kind != Pending::TABLE) return;
        pd = it->second;
        if (h.flags & wire::kLast) pending.erase(it);
      }
      auto& p = pd.peer;
      if (h.status != TE_OK) {
        // The peer answered for another life of itself (restarted): fail what waited for
        // its table instead of trusting it.
        std::vector<std::shared_ptr<Batch>> stale;
        {
          std::lock_guard<std::mutex> l(p->mu);
          p->incoming.clear();
          p->table_pending = false;
          stale.swap(p->parked);
        }
        for (auto& b : stale) {
          b->batch_status.store(h.status);
          b->fail_message("peer \"" + p->name + "\" answered its region table with " + status_name(h.status) + " (it restarted; fetch its descriptor again)");
          for (size_t i = 0; i < b->n; ++i) b->statuses[i].store(h.status);
          complete(b);
        }
        if (!(h.flags & wire::kLast)) {
          std::lock_guard<std::mutex> l(pending_mu);
          pending.erase(h.req_id);
        }
        return;
      }
      uint16_t nkeys = rd.u16();
      uint32_t count = rd.u32();
      std::vector<std::shared_ptr<Batch>> parked;
      {
        std::lock_guard<std::mutex> l(p->mu);
        for (uint32_t k = 0; k < count && rd.ok; ++k) {
          RemoteRegion rr;
          rr.addr = rd.u64();
          rr.length = rd.u64();
          rr.base = rd.u64();
          for (uint16_t j = 0; j < nkeys; ++j) rr.keys.push_back(rd.u64());
          if (rd.ok) p->incoming.push_back(std::move(rr));
        }
        if (!(h.flags & wire::kLast)) return;
        p->regions.clear();
        for (auto& x : p->incoming) p->regions[x.addr] = x;
        p->incoming.clear();
        p->table_pending = false;
        parked.swap(p->parked);
      }
      for (auto& b : parked) dispatch(b, false);
      return;
    }
    case wire::REVOKE: {
      std::vector<std::shared_ptr<Peer>> ps;
      {
        std::lock_guard<std::mutex> l(peers_mu);
        for (auto& [id, p] : peers)
          if (p->epoch == h.sender_epoch) ps.push_back(p);
      }
      for (auto& p : ps) {
        std::lock_guard<std::mutex> l(p->mu);
        p->regions.erase(h.arg);
      }
      fi_addr_t from = r.address_of(h.sender_addr, &err);
      if (from == FI_ADDR_NOTAVAIL) return;
      wire::Header a = header(r.index, wire::REVOKE_ACK, h.sender_epoch);
      a.req_id = h.req_id;
      send_ctrl(r.index, nullptr, from, a, {});
      return;
    }
    case wire::REVOKE_ACK: {
      std::shared_ptr<RevokeWait> w;
      {
        std::lock_guard<std::mutex> l(pending_mu);
        auto it = revokes.find(h.req_id);
        if (it != revokes.end()) w = it->second;
      }
      if (w) {
        std::lock_guard<std::mutex> l(w->mu);
        --w->left;
        w->cv.notify_all();
      }
      return;
    }
    case wire::NOTIFY: {
      if (h.target_epoch != opt.epoch) return;
      uint16_t nl = rd.u16();
      std::string from = rd.str(nl);
      uint32_t pl = rd.u32();
      const uint8_t* payload = rd.bytes(pl);
      if (!rd.ok) return;
      Event e;
      e.kind = Event::NOTIFY;
      e.text = from;
      e.payload.assign(payload, payload + pl);
      sink(std::move(e));
      return;
    }
    default:
      return;
  }
}

// ---------------------------------------------------------------- Transport API

Transport::Transport(Options options, std::function<void(Event)> sink) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->sink = std::move(sink);
}

Transport::~Transport() { close(); }

Status Transport::start(std::string* err) {
  Impl& m = *impl_;
  Selection sel = select_rails(m.opt);
  if (sel.status != TE_OK) {
    *err = sel.message;
    return sel.status;
  }
  for (size_t i = 0; i < sel.rails.size(); ++i) {
    auto r = std::make_unique<Rail>();
    r->owner = &m;
    r->index = static_cast<int>(i);
    r->info = sel.rails[i];
    m.rails.push_back(std::move(r));
  }
  for (auto& r : m.rails) {
    Status s = r->open(err);
    if (s != TE_OK) {
      close();
      return s;
    }
  }
  if (m.opt.pool_size) {
    Status s = Pool::instance(m.opt.pool_size, &m.pool, err);
    if (s != TE_OK) {
      close();
      return s;
    }
    MrEntry e;
    e.addr = m.pool->base();
    e.len = m.pool->size();
    for (auto& r : m.rails) {
      fid_mr* mr = nullptr;
      uint64_t key = r->prov_key ? 0 : m.next_key++;
      int rc = fi_mr_reg(r->domain, reinterpret_cast<void*>(e.addr), e.len,
                         FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, key, 0, &mr, nullptr);
      if (!rc && r->mr_endpoint) rc = fi_mr_bind(mr, &r->ep->fid, 0) ? -FI_EINVAL : fi_mr_enable(mr);
      if (rc) {
        *err = "cannot register the barex pool (" + std::to_string(e.len) + " bytes) with " + r->pub.provider + ": " + fi_error(rc);
        if (mr) fi_close(&mr->fid);
        close();
        return TE_PROVIDER_UNAVAILABLE;
      }
      e.mrs.push_back(mr);
      m.pool_keys.push_back(fi_mr_key(mr));
    }
    std::unique_lock<std::shared_mutex> l(m.mr_mu);
    m.mrs[e.addr] = e;
  }
  for (auto& r : m.rails) r->start_thread();
  m.started = true;
  return TE_OK;
}

std::vector<RailInfo> Transport::rails() const {
  std::vector<RailInfo> out;
  for (auto& r : impl_->rails) out.push_back(r->pub);
  return out;
}

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

uint64_t Transport::open_peer(const std::string& name, uint64_t epoch, const PeerAddress& address, bool same_process,
                              const std::vector<RemoteRegion>& regions) {
  Impl& m = *impl_;
  auto p = std::make_shared<Peer>();
  p->name = name;
  p->epoch = epoch;
  p->same_process = same_process;
  p->address = address;
  for (auto& r : regions) p->regions[r.addr] = r;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    p->id = m.next_peer++;
    m.peers[p->id] = p;
  }
  auto fail = [&](int32_t st, const std::string& why) {
    p->state.store(2);
    p->open_reported.store(true);
    Event e;
    e.kind = Event::OPEN;
    e.id = p->id;
    e.status = st;
    e.text = why;
    m.sink(std::move(e));
    return p->id;
  };
  if (same_process) {
    p->state.store(1);
    p->open_reported.store(true);
    Event e;
    e.kind = Event::OPEN;
    e.id = p->id;
    m.sink(std::move(e));
    return p->id;
  }
  if (address.rails.empty()) return fail(TE_INVALID_ARGUMENT, "segment \"" + name + "\" publishes no rail address");
  std::string err;
  size_t n = m.rails.size();
  p->hellos_left = static_cast<int>(n);
  std::vector<uint64_t> reqs;
  for (size_t r = 0; r < n; ++r) {
    int pr = static_cast<int>(r % address.rails.size());
    p->peer_rail.push_back(pr);
    fi_addr_t fa = m.rails[r]->address_of(address.rails[static_cast<size_t>(pr)], &err);
    if (fa == FI_ADDR_NOTAVAIL) return fail(TE_PEER_UNREACHABLE, err);
    p->dest.push_back(fa);
  }
  for (size_t r = 0; r < n; ++r) {
    uint64_t req = m.next_req++;
    {
      std::lock_guard<std::mutex> l(m.pending_mu);
      Pending pd;
      pd.kind = Pending::HELLO;
      pd.peer = p;
      pd.rail = static_cast<int>(r);
      pd.sent = now_ms();
      pd.deadline = pd.sent + m.opt.connect_timeout_ms;
      m.pending[req] = pd;
    }
    wire::Header h = m.header(static_cast<int>(r), wire::HELLO, epoch);
    h.req_id = req;
    std::vector<uint8_t> body;
    wire::put_u16(body, static_cast<uint16_t>(m.opt.segment_name.size()));
    wire::put_bytes(body, m.opt.segment_name.data(), m.opt.segment_name.size());
    m.send_ctrl(static_cast<int>(r), p, p->dest[r], h, body);
  }
  return p->id;
}

void Transport::close_peer(uint64_t id) {
  Impl& m = *impl_;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    auto it = m.peers.find(id);
    if (it == m.peers.end()) return;
    p = it->second;
    m.peers.erase(it);
  }
  if (p->state.load() < 2) p->state.store(3);
}

Status Transport::check_peer(uint64_t id, int timeout_ms, uint64_t* check_id, std::string* err) {
  Impl& m = *impl_;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    auto it = m.peers.find(id);
    if (it != m.peers.end()) p = it->second;
  }
  if (!p) return *err = "peer was not opened by this transport", TE_PEER_NOT_FOUND;
  uint64_t cid = m.next_req++;
  *check_id = cid;
  if (p->same_process || p->state.load() >= 2) {
    Event e;
    e.kind = Event::CHECK;
    e.id = cid;
    std::string why;
    {
      std::lock_guard<std::mutex> l(p->mu);
      why = p->broken_reason;
    }
    e.status = p->same_process ? 0 : TE_CONNECTION_LOST;
    e.text = p->same_process ? "{\"healthy\":true,\"rails\":[],\"sameProcess\":true}"
                             : "{\"healthy\":false,\"rails\":[],\"error\":\"" + json_escape(why) + "\"}";
    m.sink(std::move(e));
    return TE_OK;
  }
  {
    std::lock_guard<std::mutex> l(m.pending_mu);
    CheckState cs;
    cs.peer = p;
    cs.left = static_cast<int>(m.rails.size());
    m.checks[cid] = cs;
    for (size_t r = 0; r < m.rails.size(); ++r) {
      Pending pd;
      pd.kind = Pending::CHECK;
      pd.peer = p;
      pd.rail = static_cast<int>(r);
      pd.check_id = cid;
      pd.sent = now_ms();
      pd.deadline = pd.sent + timeout_ms;
      uint64_t req = m.next_req++;
      m.pending[req] = pd;
      wire::Header h = m.header(static_cast<int>(r), wire::HELLO, p->epoch);
      h.req_id = req;
      m.send_ctrl(static_cast<int>(r), p, p->dest[r], h, {});
    }
  }
  return TE_OK;
}

Status Transport::submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                         const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len, uint64_t* id,
                         std::string* err) {
  Impl& m = *impl_;
  if (m.closed.load()) return *err = "transport is closed", TE_ABORTED;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    auto it = m.peers.find(peer);
    if (it != m.peers.end()) p = it->second;
  }
  if (!p) return *err = "peer was not opened by this transport (or was closed)", TE_PEER_NOT_FOUND;
  if (notify && notify_len > wire::kMaxPayload) return *err = "a notification payload is at most 64 KiB", TE_INVALID_ARGUMENT;
  auto b = std::make_shared<Batch>();
  b->id = m.next_batch++;
  b->peer = p;
  b->n = n;
  b->ops.assign(ops, ops + n);
  b->local.assign(local, local + n);
  b->remote.assign(remote, remote + n);
  b->lengths.assign(lengths, lengths + n);
  b->statuses.reset(new std::atomic<int32_t>[n ? n : 1]);
  b->req_left.reset(new std::atomic<uint32_t>[n ? n : 1]);
  for (size_t i = 0; i < n; ++i) {
    b->statuses[i].store(0);
    b->req_left[i].store(0);
  }
  if (notify) {
    b->has_notify = true;
    b->notify.assign(notify, notify + notify_len);
  }
  *id = b->id;
  {
    std::lock_guard<std::mutex> l(m.batches_mu);
    m.batches[b->id] = b;
  }
  if (p->state.load() >= 2) {
    std::string why;
    {
      std::lock_guard<std::mutex> l(p->mu);
      why = p->broken_reason;
    }
    b->batch_status.store(TE_CONNECTION_LOST);
    b->fail_message(why.empty() ? "peer \"" + p->name + "\" is closed" : why);
    for (size_t i = 0; i < n; ++i) b->statuses[i].store(TE_CONNECTION_LOST);
    m.complete(b);
    return TE_OK;
  }
  if (p->same_process) {
    // This process: validated memcpy, no provider involved.
    for (size_t i = 0; i < n; ++i) {
      if (!lengths[i]) continue;
      Lease ll, rl;
      Status s = m.registry.acquire(local[i], lengths[i], false, ll);
      if (s == TE_OK) s = m.registry.acquire(remote[i], lengths[i], true, rl);
      if (s != TE_OK) {
        b->statuses[i].store(s);
        continue;
      }
      void* dst = reinterpret_cast<void*>(ops[i] == 1 ? remote[i] : local[i]);
      void* src = reinterpret_cast<void*>(ops[i] == 1 ? local[i] : remote[i]);
      memmove(dst, src, lengths[i]);
    }
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok = ok && b->statuses[i].load() == 0;
    if (ok && notify) {
      Event e;
      e.kind = Event::NOTIFY;
      e.text = m.opt.segment_name;
      e.payload = b->notify;
      m.sink(std::move(e));
    }
    m.complete(b);
    return TE_OK;
  }
  m.dispatch(b, true);
  return TE_OK;
}

std::unique_ptr<BatchOutcome> Transport::take_batch(uint64_t id) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> l(m.batches_mu);
  auto it = m.outcomes.find(id);
  if (it == m.outcomes.end()) return nullptr;
  auto out = std::move(it->second);
  m.outcomes.erase(it);
  return out;
}

void Transport::cancel(uint64_t id, int32_t status) {
  Impl& m = *impl_;
  std::shared_ptr<Batch> b;
  {
    std::lock_guard<std::mutex> l(m.batches_mu);
    auto it = m.batches.find(id);
    if (it == m.batches.end()) return;
    b = it->second;
    int32_t zero = 0;
    if (!b->cancel_status.compare_exchange_strong(zero, status)) return;
    b->cancel_at = now_ms();
    m.cancelled.push_back(b);
  }
  // A batch parked for a table refresh has nothing in flight.
  bool parked = false;
  {
    std::lock_guard<std::mutex> l(b->peer->mu);
    auto& v = b->peer->parked;
    auto it = std::find(v.begin(), v.end(), b);
    if (it != v.end()) {
      v.erase(it);
      parked = true;
    }
  }
  if (parked) m.complete(b);
  for (auto& r : m.rails) r->wake();
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

void Transport::close() {
  Impl& m = *impl_;
  if (m.closed.exchange(true)) return;
  for (auto& r : m.rails) {
    r->stop.store(true);
    if (r->thread.joinable()) {
      if (r->can_wait && r->cq) fi_cq_signal(r->cq);
      r->thread.join();
    }
  }
  // Fail what is still pending.
  std::vector<std::shared_ptr<Batch>> left;
  {
    std::lock_guard<std::mutex> l(m.batches_mu);
    for (auto& [id, b] : m.batches) left.push_back(b);
  }
  for (auto& b : left) {
    int32_t zero = 0;
    b->cancel_status.compare_exchange_strong(zero, TE_ABORTED);
    m.complete(b);
  }
  {
    std::lock_guard<std::mutex> l(m.pending_mu);
    for (auto& [id, pd] : m.pending)
      if (pd.kind == Pending::HELLO && !pd.peer->open_reported.exchange(true)) {
        Event e;
        e.kind = Event::OPEN;
        e.id = pd.peer->id;
        e.status = TE_ABORTED;
        e.text = "transport closed";
        pd.peer->state.store(2);
        m.sink(std::move(e));
      }
    m.pending.clear();
    m.checks.clear();
  }
  for (auto& r : m.rails) r->shutdown();
  {
    std::unique_lock<std::shared_mutex> l(m.mr_mu);
    for (auto& [a, e] : m.mrs)
      for (fid_mr* mr : e.mrs)
        if (mr) fi_close(&mr->fid);
    m.mrs.clear();
  }
  for (auto& r : m.rails) {
    if (r->av) fi_close(&r->av->fid);
    if (r->cq) fi_close(&r->cq->fid);
    if (r->domain) fi_close(&r->domain->fid);
    if (r->fabric) fi_close(&r->fabric->fid);
    if (r->info) fi_freeinfo(r->info);
    r->av = nullptr;
    r->cq = nullptr;
    r->domain = nullptr;
    r->fabric = nullptr;
    r->info = nullptr;
  }
  {
    std::lock_guard<std::mutex> l(m.peers_mu);
    m.peers.clear();
  }
}

}  // namespace te::fabric
