// A batch's life on the rail threads: validation of every request against the peer's
// published table, slicing over the rails, completion (with the notification sent after
// the data), and answers that never came.
//
// A cancelled batch settles only when every slice is terminal: queued slices fail at once,
// and posted RMA, which libfabric cannot recall, is awaited until the provider reports it
// (or the transport closes). Reporting earlier would let the caller reuse memory that a
// stalled peer's provider still reads or writes; the engine's watchdog answers the caller
// at the deadline instead and keeps that memory marked in use.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"

namespace te::fabric {

wire::Header Transport::Impl::header(int rail, uint8_t type, uint64_t target_epoch) const {
  wire::Header h;
  h.type = type;
  h.rail = static_cast<uint16_t>(rail);
  h.sender_epoch = opt.epoch;
  h.target_epoch = target_epoch;
  h.sender_addr = rails[static_cast<size_t>(rail)]->pub.addr;
  return h;
}

void Transport::Impl::send_ctrl(int rail, const std::shared_ptr<Peer>& peer, wire::Header h,
                                const std::vector<uint8_t>& body, std::shared_ptr<Batch> batch) {
  CtrlMsg m;
  m.peer = peer;
  m.dest = peer->dest[static_cast<size_t>(rail)];
  wire::put_header(m.bytes, h);
  m.bytes.insert(m.bytes.end(), body.begin(), body.end());
  m.batch = std::move(batch);
  m.deadline = now_ms() + std::max(opt.connect_timeout_ms, 1000);
  rails[static_cast<size_t>(rail)]->push_ctrl(std::move(m));
}

void Transport::Impl::send_ctrl_to(int rail, const std::vector<uint8_t>& to, wire::Header h,
                                   const std::vector<uint8_t>& body) {
  CtrlMsg m;
  m.to = to;
  wire::put_header(m.bytes, h);
  m.bytes.insert(m.bytes.end(), body.begin(), body.end());
  m.deadline = now_ms() + std::max(opt.connect_timeout_ms, 1000);
  rails[static_cast<size_t>(rail)]->push_ctrl(std::move(m));
}

std::set<fi_addr_t> Transport::Impl::addresses_in_use(int rail) {
  std::set<fi_addr_t> out;
  std::lock_guard<std::mutex> l(peers_mu);
  for (auto& [id, p] : peers) {
    if (p->state.load() >= 2 || static_cast<size_t>(rail) >= p->dest.size()) continue;
    out.insert(p->dest[static_cast<size_t>(rail)]);
  }
  return out;
}

void* Transport::Impl::local_desc(int rail, uint64_t addr) {
  {
    std::shared_lock<std::shared_mutex> l(mr_mu);
    auto it = mrs.upper_bound(addr);
    if (it != mrs.begin()) {
      --it;
      if (addr - it->second.addr < it->second.len) {
        fid_mr* mr = it->second.mrs[static_cast<size_t>(rail)];
        return mr ? fi_mr_desc(mr) : nullptr;
      }
    }
  }
  if (in_arena(addr, 1) && static_cast<size_t>(rail) < arena_mrs.size())
    return fi_mr_desc(arena_mrs[static_cast<size_t>(rail)]);
  return nullptr;
}

void Transport::Impl::finish_slice(const std::shared_ptr<Batch>& b, uint32_t req, int32_t status,
                                   const std::string& msg) {
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
    // The batch settles with the receiver's answer (NOTIFY_ACK): the send completing here
    // says nothing about whether the notification was queued there.
    uint64_t req = next_req++;
    {
      std::lock_guard<std::mutex> l(pending_mu);
      Pending pd;
      pd.kind = Pending::NOTIFY;
      pd.peer = p;
      pd.rail = 0;
      pd.batch = b;
      pd.sent = now_ms();
      pd.deadline = pd.sent + notify_ack_ms();
      track_pending(req, pd);
      b->notify_req = req;
    }
    // Cancelled meanwhile (cancel() saw no wait to end): settled here, nothing sent.
    if (b->cancel_status.load() != 0) {
      notify_failed(b, b->cancel_status.load(), "");
      return;
    }
    wire::Header h = header(0, wire::NOTIFY, p->epoch);
    h.req_id = req;
    std::vector<uint8_t> body;
    wire::put_u16(body, static_cast<uint16_t>(opt.segment_name.size()));
    wire::put_bytes(body, opt.segment_name.data(), opt.segment_name.size());
    wire::put_u32(body, static_cast<uint32_t>(b->notify.size()));
    wire::put_bytes(body, b->notify.data(), b->notify.size());
    send_ctrl(0, p, h, body, b);
    return;
  }
  complete(b);
}

void Transport::Impl::complete(const std::shared_ptr<Batch>& b) {
  if (b->done.exchange(true)) return;
  auto out = std::make_unique<BatchOutcome>();
  int32_t cancel = b->cancel_status.load();
  // The connection to the batch's peer was lost before the batch settled: requests that
  // failed in the provider are reported as that loss, however the provider worded their own
  // failure (the first operation to meet a dead peer may fail with an error of its own, a
  // refused posting or an unclassified completion, before another reports the reset).
  const bool lost = b->peer && b->peer->state.load() >= 2;
  out->statuses.resize(b->n);
  for (size_t i = 0; i < b->n; ++i) {
    int32_t st = b->statuses[i].load();
    if (st == 0 && (b->req_left[i].load() > 0 || (cancel && !b->dispatched.load()))) st = cancel ? cancel : TE_ABORTED;
    if (st == TE_TRANSFER_FAILED && lost) st = TE_CONNECTION_LOST;
    out->statuses[i] = st;
    if (st == 0) out->bytes += b->lengths[i];
  }
  out->status = cancel ? cancel : b->batch_status.load();
  out->remote_may_be_written = b->remote_unconfirmed.load(std::memory_order_acquire);
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

// Whether `r` has a key for every peer rail this side's rails talk to.
static bool keys_cover(const Peer& p, const RemoteRegion& r) {
  for (int pr : p.peer_rail)
    if (pr < 0 || static_cast<size_t>(pr) >= r.keys.size()) return false;
  return true;
}

// Where remote range [ra, ra+len) lies in `p`'s published table: its region (`*region`) and
// TE_OK, or why not. A range in no region sets `*miss` (the table may be out of date).
static int32_t locate_remote(const Peer& p, uint64_t ra, uint64_t len, const RemoteRegion** region, bool* miss) {
  if (range_overflows(ra, len)) return TE_ADDRESS_OUT_OF_RANGE;
  auto it = p.regions.upper_bound(ra);
  if (it != p.regions.begin()) {
    --it;
    const RemoteRegion& r = it->second;
    if (ra - r.addr < r.length) {
      // A region without a key for every peer rail we may use (a descriptor or table
      // that lacks them) is unusable: refused here, never indexed past its keys.
      if (r.keys.empty() || !keys_cover(p, r)) return TE_MEMORY_NOT_REGISTERED;
      if (!range_within(r.addr, r.length, ra, len)) return TE_ADDRESS_OUT_OF_RANGE;
      *region = &r;
      return TE_OK;
    }
  }
  *miss = true;
  return TE_MEMORY_NOT_REGISTERED;
}

// Validates every request (local: registered here; remote: inside a region the peer
// published), then cuts the valid ones into slices striped over the rails.
void Transport::Impl::dispatch(const std::shared_ptr<Batch>& b, bool allow_refresh, bool may_join) {
  auto& p = b->peer;
  std::vector<std::vector<Slice>> per_rail(rails.size());
  {
    std::unique_lock<std::mutex> l(p->mu);
    std::vector<int32_t> st(b->n, 0);
    std::vector<const RemoteRegion*> reg(b->n, nullptr);
    bool miss = false;
    for (size_t i = 0; i < b->n; ++i)
      if (b->lengths[i] != 0) st[i] = locate_remote(*p, b->remote[i], b->lengths[i], &reg[i], &miss);
    if (miss && allow_refresh) {
      // The cached table may predate a registration: ask the peer for its table once. A
      // request already in flight was sent before this batch unless the caller says
      // otherwise; its answer may not have the region yet, so the batch waits for the next.
      const bool send = !p->table_pending;
      if (send || may_join)
        p->parked.push_back(b);
      else
        p->parked_next.push_back(b);
      p->table_pending = true;
      l.unlock();
      if (send) request_table(p);
      return;
    }
    uint64_t total = 0;
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
      const uint32_t count = stripe_request(b, i, *reg[i], &per_rail);
      b->req_left[i].store(count);
      total += count;
    }
    b->slices_left.store(static_cast<int64_t>(total) + 1);  // +1 released below
    b->dispatched.store(true);
  }
  for (size_t r = 0; r < rails.size(); ++r) {
    // The batch's last write of an ordered size on each rail proves the delivery of its
    // others there (write_fences.h).
    mark_fence(per_rail[r], rails[r]->max_order_waw);
    if (!per_rail[r].empty()) rails[r]->push_slices(std::move(per_rail[r]));
  }
  if (b->slices_left.fetch_sub(1) == 1) data_done(b);
}

uint32_t Transport::Impl::stripe_request(const std::shared_ptr<Batch>& b, size_t i, const RemoteRegion& r,
                                         std::vector<std::vector<Slice>>* per_rail) {
  Peer& p = *b->peer;
  const uint64_t len = b->lengths[i];
  const size_t nr = rails.size();
  uint64_t off = 0;
  uint32_t count = 0;
  while (off < len) {
    uint64_t sl = std::min<uint64_t>(opt.slice_size, len - off);
    size_t rail = static_cast<size_t>(p.rr.fetch_add(1) % nr);
    int prail = p.peer_rail[rail];
    bool virt =
        static_cast<size_t>(prail) < p.address.virt_addr.size() && p.address.virt_addr[static_cast<size_t>(prail)];
    Slice s;
    s.batch = b;
    s.req = static_cast<uint32_t>(i);
    s.region = r.addr;
    s.local = b->local[i] + off;
    s.len = sl;
    uint64_t ra = b->remote[i] + off;
    s.raddr = virt ? ra : ra - r.base;
    s.key = r.keys[static_cast<size_t>(prail)];  // keys_cover checked it
    s.write = b->ops[i] == 1;
    (*per_rail)[rail].push_back(std::move(s));
    off += sl;
    ++count;
  }
  return count;
}

void Transport::Impl::track_pending(uint64_t req, const Pending& pd) {
  pending[req] = pd;
  rails[0]->wake();
}

bool Transport::Impl::has_pending() {
  std::lock_guard<std::mutex> l(pending_mu);
  return !pending.empty();
}

void Transport::Impl::housekeeping() {
  int64_t t = now_ms();
  // Requests without an answer.
  std::vector<std::pair<uint64_t, Pending>> expired;
  // Unanswered table requests are failed once pending_mu is released: their batches are
  // dispatched again, and one that waited for a later request sends it (request_table).
  std::vector<std::pair<uint64_t, Pending>> tables;
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
      if (fabric_debug())
        fprintf(stderr, "[te_fabric %s] request %llu expired\n", opt.segment_name.c_str(), (unsigned long long)id);
      if (pd.kind == Pending::NOTIFY) {
        fail_pending(id, pd, TE_TIMEOUT,
                     "\"" + pd.peer->name + "\" did not acknowledge the notification within " +
                         std::to_string(notify_ack_ms()) + " ms (it may not have been delivered)");
        continue;
      }
      if (pd.kind == Pending::TABLE) {
        tables.emplace_back(id, pd);
        continue;
      }
      fail_pending(id, pd, TE_PEER_UNREACHABLE, no_answer(pd));
    }
  }
  for (auto& [id, pd] : tables) fail_pending(id, pd, TE_PEER_UNREACHABLE, no_answer(pd));
}

std::string Transport::Impl::no_answer(const Pending& pd) const {
  return "no answer from \"" + pd.peer->name + "\" on rail " + std::to_string(pd.rail) + " (" +
         rails[static_cast<size_t>(pd.rail)]->pub.provider + ") within " + std::to_string(opt.connect_timeout_ms) +
         " ms";
}

void Transport::Impl::table_settled(std::vector<std::shared_ptr<Batch>> parked,
                                    std::vector<std::shared_ptr<Batch>> parked_next) {
  for (auto& b : parked) dispatch(b, false);
  // Submitted before any request sent from now on: they may join the next one.
  for (auto& b : parked_next) dispatch(b, true, true);
}

}  // namespace te::fabric
