// The target side's copy threads and the completions they send back (see server.h).
#include <sched.h>
#include <sys/epoll.h>

#include <cerrno>
#include <string>

#include "copy.h"
#include "server_state.h"

namespace teshm {

void Server::copy_worker(uint32_t slot) {
  std::shared_ptr<Work> finished;  // the Work this thread last finished, handed back at the next pop
  for (;;) {
    std::shared_ptr<Work> w;
    uint64_t off = 0, len = 0;
    {
      std::unique_lock<std::mutex> lock(qmu_);
      if (finished) returned_.push_back(std::move(finished));
      qcv_.wait(lock, [this] { return stop_.load() || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      std::shared_ptr<Work>& head = queue_.front();
      off = head->next;
      len = std::min<uint64_t>(opt_.chunk_bytes, head->req.len - off);
      head->next += len;
      if (head->next < head->req.len) {
        w = head;  // more chunks of it for the next thread
      } else {
        w = std::move(head);
        queue_.pop_front();
      }
    }
    Conn& c = *w->conn;
    int32_t st = te::TE_OK;
    std::string why;
    if (w->status.load() != te::TE_OK) {
      // An earlier chunk failed: the rest of the request is not copied.
    } else if (stop_.load()) {
      st = te::TE_ABORTED;
    } else if (c.dead.load()) {
      st = te::TE_CONNECTION_LOST;
    } else if (c.is_cancelled(w->req.batch)) {
      st = te::TE_ABORTED;
    } else if (!w->pool && pidfd_exited(c.pidfd)) {
      st = te::TE_PEER_FAILED;  // never copy into a recycled pid (a mapped pool is no pid's)
    } else if (!enter(c.page, slot)) {
      st = te::TE_CONNECTION_LOST;  // the initiator revoked the connection
    } else {
      if (w->pool) {
        copy_mapped(w->req.op, w->req.target_addr + off, w->pool->at(w->req.initiator_addr + off), len);
        pool_chunks_.fetch_add(1, std::memory_order_relaxed);
      } else {
        st = copy_with_peer(c.cred.pid, w->req.op, w->req.target_addr + off, w->req.initiator_addr + off, len, &why);
        process_vm_chunks_.fetch_add(1, std::memory_order_relaxed);
      }
      leave(c.page, slot);
    }
    if (st != te::TE_OK) {
      int32_t zero = te::TE_OK;
      w->status.compare_exchange_strong(zero, st);
    }
    if (w->chunks_done.fetch_add(1) + 1 == w->chunks) {
      finish(*w);
      finished = std::move(w);
    }
  }
}

void Server::finish(Work& w) {
  w.lease.release();
  Conn& c = *w.conn;
  // Completions are coalesced while more of the same connection's requests are being
  // copied, but only up to kFlushBytes of copies: held longer, the initiator learns of a
  // whole window at once and the copy threads idle while it refills (unbounded, at 1 MiB
  // with 4 batches in flight a fifth of the time). 1 MiB rather than 256 KiB: a batch of
  // 16 x 64 KiB is answered in one message instead of four, each of which woke the
  // initiator (64 KiB, 16 batches in flight: 13.8-15.1 GB/s against 10.6-12.5; 1-4 in
  // flight unchanged).
  //
  // Past kFlushBytes they are still held while kHoldWhileQueued or more of this
  // connection's copies wait behind them, until they reach half of what waits: the copy
  // threads have that much left to do while the initiator hears and refills, so a deep
  // window is answered in a few messages instead of one per MiB (64 KiB, batches of 16, 16
  // in flight: 1.12x writes and reads; windows under 4 MiB are answered as before).
  //
  // "More of this connection's requests", not "more work in the queue": another
  // connection's work may keep the queue busy for as long as its initiator sends, and a
  // completion held for that was stranded (its initiator waiting for its deadline).
  // Every request queues its completion before it leaves `outstanding`, so the request
  // that takes `outstanding` to zero sees every completion queued before it, and sends them.
  complete(c, w.req.seq, w.status.load(), false);
  const uint64_t unflushed = c.unflushed_bytes.fetch_add(w.req.len) + w.req.len;
  const uint64_t remaining = c.outstanding_bytes.fetch_sub(w.req.len) - w.req.len;
  const bool over = unflushed >= kFlushBytes && (remaining < kHoldWhileQueued || unflushed >= remaining / 2);
  const bool last = c.outstanding.fetch_sub(1) == 1;
  if (over || last) {
    {
      std::lock_guard<std::mutex> lock(c.mu);
      flush_locked(c);
    }
    // The answer just sent starts the initiator's refill (its connection thread, then its JS
    // thread, then this process's server thread), while the copy threads may hold every CPU:
    // the threads woken to refill then wait out this thread's time slice, and the queue runs
    // dry meanwhile. Giving the CPU up once per answer lets them run now. Not after the last
    // answer: the queue is empty then and this thread sleeps anyway. Two vCPUs, 5-6
    // alternating rounds: 1 MiB x 16 in flight 1.08-1.12x (writes) and 1.08x (reads); 64 KiB
    // and 16 MiB 0.98-1.03x.
    if (over && !last) sched_yield();
  }
  // Every chunk is done: nothing copies for this connection through this Work any more, and
  // the connection closes when its last queued copy lets go of it (see ~Conn).
  w.pool.reset();
  w.conn.reset();
}

void Server::complete(Conn& c, uint64_t seq, int32_t status, bool flush_now) {
  std::lock_guard<std::mutex> lock(c.mu);
  c.pending.push_back(Completion{seq, status});
  if (flush_now || c.pending.size() >= 256) flush_locked(c);
  uint64_t peak = pending_peak_.load(std::memory_order_relaxed);
  while (c.pending.size() > peak &&
         !pending_peak_.compare_exchange_weak(peak, c.pending.size(), std::memory_order_relaxed)) {
  }
}

// Loop thread, under c.mu: the events this connection is watched for. While paused only
// EPOLLOUT: writable means the peer read, and the handler flushes and resumes reading.
void Server::watch_locked(Conn& c) {
  if (c.dead.load()) return;
  epoll_event ev{};
  ev.events = c.paused ? uint32_t(EPOLLOUT) : uint32_t(EPOLLIN) | (c.want_out ? uint32_t(EPOLLOUT) : 0u);
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void Server::flush_locked(Conn& c) {
  if (c.dead.load()) {
    c.pending.clear();
    return;
  }
  // The socket was full and EPOLLOUT is awaited: the loop flushes when it drains. Trying again
  // per completion would re-encode up to a whole message each time for nothing.
  if (c.want_out) return;
  c.unflushed_bytes.store(0);
  std::vector<uint8_t>& out = c.out_msg;
  size_t at = 0;
  while (at < c.pending.size()) {
    size_t n = std::min(kMaxCompletionsPerMessage, c.pending.size() - at);
    encode_completions(c.pending.data() + at, n, &out);
    if (send_message(c.fd, out) < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!c.want_out) {
          c.want_out = true;
          wake();
        }
        break;
      }
      break;  // the initiator is gone: its end-of-stream drops the connection
    }
    completion_messages_.fetch_add(1, std::memory_order_relaxed);
    at += n;
  }
  c.pending.erase(c.pending.begin(), c.pending.begin() + static_cast<long>(at));
}

}  // namespace teshm
