// Control messages received on a rail: hello and its answer, region tables, revocations,
// notifications. Malformed or foreign messages are dropped.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"

namespace te::fabric {

void Transport::Impl::on_message(Rail& r, const uint8_t* data, size_t len) {
  wire::Header h;
  size_t off = 0;
  if (!wire::get_header(data, len, &h, &off)) return;  // not ours / malformed: dropped
  if (fabric_debug())
    fprintf(stderr, "[te_fabric %s] message type %d req %llu status %d\n", opt.segment_name.c_str(), h.type,
            (unsigned long long)h.req_id, h.status);
  wire::Reader rd{data, len, off};
  switch (h.type) {
    case wire::HELLO:
      return on_hello(r, h, rd);
    case wire::HELLO_ACK:
      return on_hello_ack(r, h, rd);
    case wire::TABLE_REQ:
      return on_table_request(r, h, rd);
    case wire::TABLE:
      return on_table(r, h, rd);
    case wire::REVOKE:
      return on_revoke(r, h, rd);
    case wire::REVOKE_ACK:
      return on_revoke_ack(r, h, rd);
    case wire::NOTIFY:
      return on_notify(r, h, rd);
    case wire::NOTIFY_ACK:
      return on_notify_ack(r, h, rd);
    default:
      return;  // a type this side does not know: dropped
  }
}

void Transport::Impl::on_hello(Rail& r, const wire::Header& h, wire::Reader&) {
  std::string err;
  fi_addr_t from = r.address_of(h.sender_addr, &err);
  if (from == FI_ADDR_NOTAVAIL) return;
  bool ok = h.target_epoch == opt.epoch;
  if (ok && r.index == 0) remember_peer(h.sender_addr);
  wire::Header a = header(r.index, wire::HELLO_ACK, h.sender_epoch);
  a.req_id = h.req_id;
  a.status = ok ? TE_OK : TE_STALE_DESCRIPTOR;
  send_ctrl_to(r.index, h.sender_addr, a, {});
}

void Transport::Impl::on_hello_ack(Rail& r, const wire::Header& h, wire::Reader&) {
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
                                ",\"rttMs\":" + std::to_string(rtt) +
                                (ok ? "" : ",\"error\":\"segment restarted (epoch changed)\"") + "}");
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
    fail_pending(
        h.req_id, pd, h.status,
        "segment \"" + p->name +
            "\" answered with epoch mismatch: the descriptor describes an earlier life of that segment (restarted)");
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
}

void Transport::Impl::on_table_request(Rail& r, const wire::Header& h, wire::Reader&) {
  std::string err;
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
      for (size_t k = 0; k < nkeys; ++k)
        wire::put_u64(body, k < table[i].second.keys.size() ? table[i].second.keys[k] : 0);
    }
    wire::Header a = header(r.index, wire::TABLE, h.sender_epoch);
    a.req_id = h.req_id;
    a.status = h.target_epoch == opt.epoch ? TE_OK : TE_STALE_DESCRIPTOR;
    a.flags = i >= table.size() ? wire::kLast : 0;
    send_ctrl_to(r.index, h.sender_addr, a, body);
  } while (i < table.size());
}

void Transport::Impl::on_table(Rail& r, const wire::Header& h, wire::Reader& rd) {
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
      stale.insert(stale.end(), p->parked_next.begin(), p->parked_next.end());
      p->parked_next.clear();
    }
    for (auto& b : stale) {
      b->batch_status.store(h.status);
      b->fail_message("peer \"" + p->name + "\" answered its region table with " + status_name(h.status) +
                      " (it restarted; fetch its descriptor again)");
      for (size_t i = 0; i < b->n; ++i) b->statuses[i].store(h.status);
      complete(b);
    }
    if (!(h.flags & wire::kLast)) {
      std::lock_guard<std::mutex> l(pending_mu);
      pending.erase(h.req_id);
    }
    return;
  }
  // A malformed or oversized answer is refused: the batches that waited for it are
  // checked against the table this side already had.
  std::vector<wire::TableEntry> chunk;
  bool refused = !wire::get_table(rd, &chunk);
  std::vector<std::shared_ptr<Batch>> parked, parked_next;
  {
    std::lock_guard<std::mutex> l(p->mu);
    if (!refused && p->incoming.size() + chunk.size() > kMaxTableRegions) refused = true;
    // One key per rail of the peer: fewer would leave some of our rails without a key.
    for (size_t k = 0; !refused && k < chunk.size(); ++k)
      if (chunk[k].keys.empty() || chunk[k].keys.size() < p->address.rails.size()) refused = true;
    if (!refused) {
      for (auto& e : chunk) p->incoming.push_back(RemoteRegion{e.addr, e.length, e.base, std::move(e.keys)});
      if (!(h.flags & wire::kLast)) return;
      p->regions.clear();
      for (auto& x : p->incoming) p->regions[x.addr] = x;
    }
    p->incoming.clear();
    p->table_pending = false;
    parked.swap(p->parked);
    parked_next.swap(p->parked_next);
  }
  if (refused) {
    std::lock_guard<std::mutex> l(pending_mu);
    pending.erase(h.req_id);
  }
  table_settled(std::move(parked), std::move(parked_next));
}

void Transport::Impl::on_revoke(Rail& r, const wire::Header& h, wire::Reader&) {
  std::string err;
  // Drop the region from every cached table of that peer, then answer only once the
  // operations already posted into it finished: the owner frees the memory after the
  // answer, so nothing of ours may still be writing there.
  fi_addr_t from = r.address_of(h.sender_addr, &err);
  if (from == FI_ADDR_NOTAVAIL) return;
  auto ack = std::make_shared<OwedAck>();
  ack->rail = r.index;
  ack->to = h.sender_addr;
  ack->req = h.req_id;
  ack->epoch = h.sender_epoch;
  std::vector<std::shared_ptr<Peer>> ps;
  {
    std::lock_guard<std::mutex> l(peers_mu);
    for (auto& [id, p] : peers)
      if (p->epoch == h.sender_epoch) ps.push_back(p);
  }
  for (auto& p : ps) {
    std::lock_guard<std::mutex> l(p->mu);
    p->regions.erase(h.arg);
    auto it = p->posted.find(h.arg);
    if (it != p->posted.end() && it->second > 0) {
      ack->left.fetch_add(1);
      p->owed.emplace(h.arg, ack);
    }
  }
  if (ack->left.fetch_sub(1) == 1) send_owed(ack);
}

void Transport::Impl::on_revoke_ack(Rail& r, const wire::Header& h, wire::Reader&) {
  std::shared_ptr<RevokeWait> w;
  {
    std::lock_guard<std::mutex> l(pending_mu);
    auto it = revokes.find(h.req_id);
    if (it != revokes.end()) w = it->second;
  }
  if (w) {
    std::lock_guard<std::mutex> l(w->mu);
    w->waiting.erase(h.sender_addr);
    w->cv.notify_all();
  }
}

void Transport::Impl::on_notify(Rail& r, const wire::Header& h, wire::Reader& rd) {
  // Every NOTIFY is answered (NOTIFY_ACK, its req_id): the sender's batch settles with
  // the answer, so a notification refused here fails it instead of passing for delivered.
  // A sender address that does not fit this rail could not be answered: dropped.
  if (!r.address_fits(h.sender_addr)) return;
  int32_t st = TE_OK;
  std::string from;
  const uint8_t* payload = nullptr;
  uint32_t pl = 0;
  if (h.target_epoch != opt.epoch)
    st = TE_STALE_DESCRIPTOR;
  else if (!wire::get_notify(rd, &from, &payload, &pl))
    st = TE_BAD_FRAME;
  // Beyond the budget (notifications the JS thread has not taken yet) it is refused.
  else
    st = deliver_notification(from, std::vector<uint8_t>(payload, payload + pl));
  if (st != TE_OK && fabric_debug())
    fprintf(stderr, "[te_fabric %s] notification from \"%s\" refused: %s\n", opt.segment_name.c_str(), from.c_str(),
            status_name(st));
  wire::Header a = header(r.index, wire::NOTIFY_ACK, h.sender_epoch);
  a.req_id = h.req_id;
  a.status = st;
  send_ctrl_to(r.index, h.sender_addr, a, {});
}

void Transport::Impl::on_notify_ack(Rail& r, const wire::Header& h, wire::Reader&) {
  Pending pd;
  {
    std::lock_guard<std::mutex> l(pending_mu);
    auto it = pending.find(h.req_id);
    if (it == pending.end() || it->second.kind != Pending::NOTIFY || it->second.rail != r.index) return;
    // Only the peer the notification went to answers for it (request ids are guessable).
    const Peer& p = *it->second.peer;
    const size_t ri = static_cast<size_t>(r.index);
    if (h.sender_epoch != p.epoch || ri >= p.peer_rail.size() ||
        static_cast<size_t>(p.peer_rail[ri]) >= p.address.rails.size() ||
        h.sender_addr != p.address.rails[static_cast<size_t>(p.peer_rail[ri])])
      return;
    pd = it->second;
    pending.erase(it);
  }
  auto& b = pd.batch;
  if (!b) return;
  int32_t st = h.status;
  if (st != TE_OK) {
    std::string why;
    if (st == TE_POOL_EXHAUSTED)
      why = "\"" + pd.peer->name +
            "\" refused the notification: its notification queue is full (notifyQueuePerPeer / notifyQueueBytes)";
    else if (st == TE_STALE_DESCRIPTOR)
      why = "\"" + pd.peer->name +
            "\" refused the notification: it restarted (epoch changed; fetch its descriptor again)";
    else
      why = "\"" + pd.peer->name + "\" refused the notification: " + status_name(st);
    // A status this side does not know (or a positive one) is not passed on as such.
    if (st > 0 || (st != TE_INTERNAL && std::strcmp(status_name(st), "INTERNAL") == 0)) st = TE_TRANSFER_FAILED;
    b->fail_message(why);
    b->batch_status.store(st);
  }
  complete(b);
}

}  // namespace te::fabric

namespace te::fabric {

namespace {
// What one queued notification costs besides its payload (event, strings, bookkeeping), so
// a flood of empty ones is bounded by the byte budget too (as mooncake-tcp counts).
constexpr uint64_t kNotifyOverhead = 256;
}  // namespace

Status Transport::Impl::deliver_notification(const std::string& from, std::vector<uint8_t> payload) {
  if (!notify_budget.admit(from, payload.size() + kNotifyOverhead)) return TE_POOL_EXHAUSTED;
  Event e;
  e.kind = Event::NOTIFY;
  e.text = from;
  e.payload = std::move(payload);
  sink(std::move(e));
  return TE_OK;
}

void Transport::Impl::notification_taken(const std::string& from, size_t bytes) {
  notify_budget.release(from, bytes + kNotifyOverhead);
}

void Transport::notification_taken(const std::string& from, size_t bytes) { impl_->notification_taken(from, bytes); }

void Transport::Impl::remember_peer(const std::vector<uint8_t>& addr) {
  std::lock_guard<std::mutex> l(known_mu);
  known[addr] = now_ms();
  if (known.size() <= kMaxKnownPeers) return;
  auto oldest = known.begin();
  for (auto it = known.begin(); it != known.end(); ++it)
    if (it->second < oldest->second) oldest = it;
  known.erase(oldest);
}

void Transport::Impl::drained(const std::shared_ptr<Peer>& p, uint64_t region) {
  std::vector<std::shared_ptr<OwedAck>> ready;
  {
    std::lock_guard<std::mutex> l(p->mu);
    auto it = p->posted.find(region);
    if (it == p->posted.end() || --it->second > 0) return;
    p->posted.erase(it);
    auto range = p->owed.equal_range(region);
    for (auto o = range.first; o != range.second; ++o) ready.push_back(o->second);
    p->owed.erase(range.first, range.second);
  }
  for (auto& a : ready)
    if (a->left.fetch_sub(1) == 1) send_owed(a);
}

void Transport::Impl::send_owed(const std::shared_ptr<OwedAck>& a) {
  wire::Header h = header(a->rail, wire::REVOKE_ACK, a->epoch);
  h.req_id = a->req;
  send_ctrl_to(a->rail, a->to, h, {});
}

}  // namespace te::fabric
