// Posting a rail's slices: admission at posting time, RMA operations grouped into
// scatter-gather lists, and what a refused post means for the batch.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "impl.h"
#include "select.h"

namespace te::fabric {

int32_t status_of_post_error(int err) {
  if (err < 0) err = -err;
  // The sockets provider connects on the first operation to an address, and again after a
  // connection dropped; when that connect fails (nothing listens there any more: the peer's
  // process is gone) the posting is refused with FI_ENOENT, "no connection to that address".
  if (err == FI_ENOENT) return TE_CONNECTION_LOST;
  // A connection error refused at posting means what it means in a completion. Anything
  // else (a key or argument the provider rejects before sending) stays a failed transfer:
  // nothing was exchanged with the peer to say which.
  return status_of_cq_error(err) == TE_CONNECTION_LOST ? TE_CONNECTION_LOST : TE_TRANSFER_FAILED;
}

// Posts queued control messages and slices; true when something was posted or failed.
bool Rail::post_some() {
  bool did = post_ctrl();
  // Slices are taken from the queue in chunks and posted without the queue lock: callers
  // queue more (push_slices, from the JS thread) while this thread is in the provider.
  // Their places in the window are reserved while they are out of the queue, one per slice;
  // a place is an operation, and an operation carries up to max_parts slices, so `room` free
  // places take up to max_parts times as many slices. Taken one per place, a full window
  // (a PD batch of hundreds of requests) would free one place at a time and post every
  // slice alone: grouping would end exactly where it pays.
  for (;;) {
    if (queued_slices.load() == 0) return did;
    std::deque<Slice> chunk;
    size_t room = 0;
    {
      std::lock_guard<std::mutex> ql(q_mu);
      room = inflight < window ? static_cast<size_t>(window - inflight) : 0;
      size_t take = std::min<size_t>({room * static_cast<size_t>(max_parts), slices.size(), kPostChunk});
      for (size_t i = 0; i < take; ++i) {
        chunk.push_back(std::move(slices.front()));
        slices.pop_front();
      }
      inflight += static_cast<int>(take);
      count_work();
    }
    if (chunk.empty()) return did;
    std::vector<Op*> posted;
    posted.reserve(chunk.size());
    int merged = 0;
    const bool full = post_chunk(chunk, posted, merged, room);
    did = true;  // posted, finished or refused: something moved
    {
      std::lock_guard<std::mutex> ql(q_mu);
      for (Op* op : posted) live.insert(op);
      // What was not posted (the provider was full) goes back to the front, in order; a
      // place is an operation, so slices that shared one give theirs back.
      inflight -= static_cast<int>(chunk.size()) + merged;
      while (!chunk.empty()) {
        slices.push_front(std::move(chunk.back()));
        chunk.pop_back();
      }
      count_work();
    }
    if (full) return true;
  }
}

// Checks, at posting time, what may have changed since the batch was validated: the batch
// ended or was cancelled, the peer broke, the peer revoked the region (re-checked under the
// peer's lock and counted into the region, so a revocation waits for the operation), local
// memory was unregistered. Refusals hold nothing; `why` is empty where the status says it all.
int32_t Rail::admit(const Slice& s, Lease& lease, std::string& why) {
  const std::shared_ptr<Batch>& b = s.batch;
  const std::shared_ptr<Peer>& peer = b->peer;
  int32_t cancel = b->cancel_status.load();
  if (cancel) return cancel;
  if (b->done.load()) return TE_ABORTED;
  if (peer->state.load() >= 2) {
    std::lock_guard<std::mutex> pl(peer->mu);
    why = peer->broken_reason;
    return TE_CONNECTION_LOST;
  }
  {
    std::lock_guard<std::mutex> pl(peer->mu);
    auto it = peer->regions.find(s.region);
    if (it == peer->regions.end() ||
        std::find(it->second.keys.begin(), it->second.keys.end(), s.key) == it->second.keys.end()) {
      why = "the peer revoked the region while the batch was queued";
      return TE_MEMORY_NOT_REGISTERED;
    }
    ++peer->posted[s.region];
  }
  Status ls = owner->registry.acquire(s.local, s.len, false, lease);
  if (ls != TE_OK) {
    owner->drained(peer, s.region);
    why = "local memory was unregistered while the batch was queued";
    return ls;
  }
  return TE_OK;
}

// Posts the slices of `chunk` in order, without the queue lock (their window places are
// reserved). Consecutive slices of one batch to one peer region, in one direction, go out
// as one scatter-gather operation where the provider allows several iovs (tcp;ofi_rxm: 4),
// which divides the provider's per-operation cost (a message and a syscall on tcp) among
// them. Failed or refused slices are finished (and their places given back); posted ops are
// added to `posted`, at most `max_ops` of them (the window's free places); on a full provider
// the rest stays in `chunk` and the result is true. The caller returns what stayed to the queue.
bool Rail::post_chunk(std::deque<Slice>& chunk, std::vector<Op*>& posted, int& merged, size_t max_ops) {
  while (!chunk.empty() && posted.size() < max_ops) {
    Op* op = new Op();
    op->kind = Op::DATA;
    {
      Slice& s = chunk.front();
      std::string why;
      int32_t st = admit(s, op->parts[0].lease, why);
      if (st != TE_OK) {
        Slice x = std::move(s);
        chunk.pop_front();
        delete op;
        give_back_place();
        if (x.fence) fence_dropped(x, st, why);
        owner->finish_slice(x.batch, x.req, st, why);
        continue;
      }
    }
    // What the group shares, copied: the slices are moved out of `chunk` once posted.
    const bool write = chunk.front().write;
    const uint64_t region = chunk.front().region, key = chunk.front().key;
    op->batch = chunk.front().batch;
    op->peer = op->batch->peer;
    op->dest = op->peer->dest[static_cast<size_t>(index)];
    op->write = write;
    Group g;
    const size_t n = gather_group(chunk, op, region, key, g);
    const uint64_t total = g.total;
    const bool fence = g.fence;
    op->nparts = static_cast<int>(n);
    fi_msg_rma msg{};
    msg.msg_iov = g.iov;
    msg.desc = g.desc;
    msg.iov_count = n;
    msg.addr = op->dest;
    msg.rma_iov = g.riov;
    msg.rma_iov_count = n;
    msg.context = &op->ctx;
    // A write is posted plainly when a later write of its batch (the fence) proves it.
    const bool dc = delivery_complete;
    const bool plain = write && !fence && dc && ordered_writes && total <= max_order_waw;
    uint64_t flags = FI_COMPLETION;
    if (write && dc && !plain) flags |= FI_DELIVERY_COMPLETE;
    // A refused post fails this operation only (below); it is never retried with weaker
    // flags: a write that completes once sent would be reported as applied.
    ssize_t rc = injected_post_error();
    if (rc == 0) rc = write ? fi_writemsg(ep, &msg, flags) : fi_readmsg(ep, &msg, flags);
    if (rc == -FI_EAGAIN) {
      std::shared_ptr<Peer> peer = op->peer;
      delete op;                                                             // releases the leases
      for (size_t i = 0; i < n; ++i) owner->drained(peer, chunk[i].region);  // counted again when posted again
      return true;
    }
    if (rc) {
      std::shared_ptr<Peer> peer = op->peer;
      delete op;
      fail_group(chunk, n, peer, static_cast<int>(rc), write, (flags & FI_DELIVERY_COMPLETE) != 0);
      continue;
    }
    for (size_t i = 0; i < n; ++i) chunk.pop_front();
    merged += static_cast<int>(n) - 1;
    rma_ops.fetch_add(1, std::memory_order_relaxed);
    rma_slices.fetch_add(n, std::memory_order_relaxed);
    if (flags & FI_DELIVERY_COMPLETE) rma_delivery_complete_ops.fetch_add(1, std::memory_order_relaxed);
    op->plain_write = plain;
    op->fence = fence;
    if (plain) fences.posted_plain(op->batch.get());
    posted.push_back(op);
  }
  return false;
}

// Takes the slices from the front of `chunk` that one operation carries (the front one is
// admitted already): same batch, direction and region, within the group and ordered sizes.
size_t Rail::gather_group(std::deque<Slice>& chunk, Op* op, uint64_t region, uint64_t key, Group& g) {
  const uint64_t group_bytes = owner->opt.slice_size;
  const bool write = chunk.front().write;
  size_t n = 0;
  for (;;) {
    const Slice& s = chunk[n];
    OpPart& part = op->parts[n];
    part.req = s.req;
    part.len = s.len;
    part.region = s.region;
    g.iov[n] = iovec{reinterpret_cast<void*>(s.local), s.len};
    g.desc[n] = mr_local ? owner->local_desc(index, s.local) : nullptr;
    g.riov[n] = fi_rma_iov{s.raddr, s.len, s.key};
    g.total += s.len;
    g.fence = g.fence || (s.write && s.fence);
    ++n;
    if (g.fence || n >= static_cast<size_t>(max_parts) || n >= chunk.size()) return n;
    const Slice& t = chunk[n];
    // Same batch, direction and region only: one op has one outcome, and a revoked region
    // must fail only the requests that targeted it.
    if (t.batch != op->batch || t.write != write || t.region != region || t.key != key || g.total + t.len > group_bytes)
      return n;
    // The fence goes out within the ordered size, else its delivery proves nothing.
    if (t.write && t.fence && g.total + t.len > max_order_waw) return n;
    std::string ignored;
    if (admit(t, op->parts[n].lease, ignored) != TE_OK) return n;  // refused on its own turn
  }
}

// The provider refused to post the first `n` slices of `chunk` as one operation (`rc`):
// they fail with the status it means, and their window places are given back.
void Rail::fail_group(std::deque<Slice>& chunk, size_t n, const std::shared_ptr<Peer>& peer, int rc, bool write,
                      bool delivery_complete_flag) {
  std::string why = std::string(write ? "fi_writemsg" : "fi_readmsg") + " on " + pub.provider + ": " + fi_error(rc);
  if (rc == -FI_ENOENT) why += " (no connection to the peer, and none could be made)";
  if (delivery_complete_flag && (rc == -FI_EBADFLAGS || rc == -FI_EOPNOTSUPP || rc == -FI_ENOSYS))
    why +=
        " (the provider refuses FI_DELIVERY_COMPLETE writes: set deliveryComplete: false to accept writes complete "
        "once sent)";
  // A peer the provider can no longer reach is broken, as when a completion says so:
  // what is queued to it is refused at admission, without posting (and reconnecting) again.
  const int32_t st = status_of_post_error(rc);
  if (st == TE_CONNECTION_LOST && peer) owner->peer_broken(peer, why);
  for (size_t i = 0; i < n; ++i) {
    Slice x = std::move(chunk.front());
    chunk.pop_front();
    give_back_place();
    owner->drained(peer, x.region);
    if (x.fence) fence_dropped(x, st, why);
    owner->finish_slice(x.batch, x.req, st, why);
  }
}

// A slice leaves the window without an operation in flight.
void Rail::give_back_place() {
  std::lock_guard<std::mutex> ql(q_mu);
  --inflight;
  count_work();
}

}  // namespace te::fabric
