// te::fabric::Transport over libfabric: start (rails, the plugin's arena), submit (same-process
// copies or dispatch to the rails), cancel, close. Registration is in memory.cpp, peers in
// peers.cpp, the rail threads' batch handling in batches.cpp and messages.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "impl.h"
#include "select.h"

namespace te::fabric {

Transport::Transport(Options options, std::function<void(Event)> sink)
    : impl_(std::make_unique<Impl>(std::move(options))) {
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
  if (m.opt.arena_size) {
    // Local access only: remote access is granted per registered region (memory.cpp).
    Status s = m.register_on_rails(m.opt.arena_base, m.opt.arena_size, FI_READ | FI_WRITE | FI_SEND | FI_RECV,
                                   &m.arena_mrs, err);
    if (s != TE_OK) {
      *err = "cannot register the " + m.opt.plugin + " pool: " + *err;
      close();
      return TE_PROVIDER_UNAVAILABLE;
    }
  }
  for (auto& r : m.rails) r->start_thread();
  m.started = true;
  return TE_OK;
}

std::vector<RailInfo> Transport::rails() const {
  std::vector<RailInfo> out;
  for (auto& r : impl_->rails) {
    out.push_back(r->pub);
    out.back().slices_per_op = r->max_parts;
    out.back().rma_ops = r->rma_ops.load(std::memory_order_relaxed);
    out.back().rma_slices = r->rma_slices.load(std::memory_order_relaxed);
    out.back().rma_delivery_complete_ops = r->rma_delivery_complete_ops.load(std::memory_order_relaxed);
    out.back().waits = r->waits.load(std::memory_order_relaxed);
    out.back().waits_with_data = r->waits_with_data.load(std::memory_order_relaxed);
  }
  return out;
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
  if (notify && notify_len > wire::kMaxPayload)
    return *err = "a notification payload is at most 64 KiB", TE_INVALID_ARGUMENT;
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
    m.copy_locally(std::move(b));
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
  }
  // A batch parked for a table refresh has nothing in flight.
  bool parked = false;
  {
    std::lock_guard<std::mutex> l(b->peer->mu);
    for (auto* v : {&b->peer->parked, &b->peer->parked_next}) {
      auto it = std::find(v->begin(), v->end(), b);
      if (it != v->end()) {
        v->erase(it);
        parked = true;
      }
    }
  }
  if (parked) m.complete(b);
  // A batch waiting only for its notification's acknowledgement has nothing in flight
  // either (the NOTIFY is a copy): it settles now, and a late answer finds no request.
  bool acking = false;
  {
    std::lock_guard<std::mutex> l(m.pending_mu);
    acking = b->notify_req != 0 && m.pending.erase(b->notify_req) > 0;
  }
  if (acking) m.notify_failed(b, status, "cancelled while waiting for the notification's acknowledgement");
  for (auto& r : m.rails) r->wake();
}

void Transport::close() {
  Impl& m = *impl_;
  if (m.closed.exchange(true)) return;
  std::unique_lock<std::shared_mutex> life(m.life_mu);  // waits for registrations in progress
  m.stop_local_copies();                                // a copy in progress stops at its next step
  for (auto& r : m.rails) {
    r->stop.store(true);
    if (r->thread.joinable()) {
      if (r->can_wait && r->cq) fi_cq_signal(r->cq);
      r->thread.join();
    }
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
  // The endpoints close first: after that no posted operation can touch memory, so what
  // is still pending may settle.
  for (auto& r : m.rails) r->shutdown();
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
    std::unique_lock<std::shared_mutex> l(m.mr_mu);
    for (auto& [a, e] : m.mrs)
      for (fid_mr* mr : e.mrs)
        if (mr) fi_close(&mr->fid);
    m.mrs.clear();
    for (fid_mr* mr : m.arena_mrs) fi_close(&mr->fid);
    m.arena_mrs.clear();
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
