// The target side's per-connection and per-request state, shared by server.cpp (the
// connection loop) and server_copy.cpp (the copy threads and completions); private to Server.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "server.h"

namespace teshm {

struct Server::Conn {
  int fd = -1;
  PeerCred cred;
  int pidfd = -1;
  ControlPage* page = nullptr;
  bool hello_done = false;
  std::chrono::steady_clock::time_point accepted_at = std::chrono::steady_clock::now();
  std::string name;
  std::atomic<bool> dead{false};
  std::atomic<uint32_t> outstanding{0};
  std::atomic<uint64_t> outstanding_bytes{0};  // of the requests in `outstanding` (see finish())
  std::atomic<uint64_t> unflushed_bytes{0};    // copied since completions were last sent
  std::mutex mu;                               // guards everything below
  std::vector<Completion> pending;
  std::vector<uint8_t> out_msg;  // flush_locked()'s encoding buffer, kept: sending allocates nothing
  bool want_out = false;
  bool paused = false;  // reading this connection's messages is suspended (see kPendingPauseAt)
  std::unordered_set<uint64_t> cancelled;
  std::deque<uint64_t> cancel_order;
  std::unordered_map<uint32_t, std::shared_ptr<PeerPool>> pools;  // the loop thread's, not under mu

  // Set (under mu) with the first CANCEL: until then a chunk's check takes no lock, which
  // the copy threads otherwise fought over with each other and the loop thread per chunk.
  // A CANCEL that lands just after the check finds the chunk already being copied, as it
  // would had it come a moment later.
  std::atomic<bool> any_cancelled{false};

  bool is_cancelled(uint64_t batch) {
    if (!any_cancelled.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> lock(mu);
    return cancelled.count(batch) != 0;
  }
  // The socket closes only when the last queued copy let go of the connection: an initiator
  // that sees end-of-stream knows no copy of this connection runs any more.
  ~Conn() {
    unmap_control_page(page);
    if (pidfd >= 0) close(pidfd);
    if (fd >= 0) close(fd);
  }
};

/**
 * One request being copied; its chunks are claimed one by one by the copy threads. A finished
 * Work is handed back to the loop thread and reused (see Server::returned_).
 */
struct Server::Work {
  std::shared_ptr<Conn> conn;
  Request req;
  std::shared_ptr<PeerPool> pool;  // the initiator range lies in this mapped pool: memcpy, not process_vm_*
  te::Lease lease;                 // on the target range: unregisterMemory waits for it
  uint64_t next = 0;               // next chunk offset, under qmu_
  uint64_t chunks = 0;
  std::atomic<uint64_t> chunks_done{0};
  std::atomic<int32_t> status{0};

  /** Ready for another request; finish() has let go of the connection, the pool and the lease. */
  void reset() {
    req = Request{};
    next = 0;
    chunks = 0;
    chunks_done.store(0, std::memory_order_relaxed);
    status.store(0, std::memory_order_relaxed);
  }
};

// Finished Works the loop thread keeps for reuse; past this many (a burst deeper than any
// steady window) the rest are freed.
constexpr size_t kMaxSpareWork = 1024;

constexpr size_t kMaxCancelled = 4096;
constexpr uint64_t kFlushBytes = 1 << 20;       // see finish()
constexpr uint64_t kHoldWhileQueued = 4 << 20;  // see finish()
// Pools one connection may have mapped; past it a pool is not mapped and its requests are
// copied with process_vm_* like any other memory (slower, never wrong).
constexpr size_t kMaxPoolsPerConnection = 64;

// Back-pressure on the completions a peer does not read. Every request a peer sends ends in
// one 16-byte completion, and refused ones (past maxOutstanding, out of range, unregistered,
// a refused NOTIFY) are answered at once without counting against `outstanding`: a peer that
// sends them and never reads its socket would grow `pending` by 16 B per 48 B it sends. So
// while `pending` holds kPendingPauseAt completions or more this connection's messages are
// not read (EPOLLIN is dropped; the peer's sends block or fail with EAGAIN once the socket
// buffer fills); reading resumes when the peer drained `pending` below kPendingResumeAt.
// Back-pressure rather than dropping the connection: an honest initiator that is merely slow
// to read is not punished, and a peer that never drains holds what an idle connection holds
// (one slot of maxConnections) plus a bounded `pending`: at most kPendingPauseAt + one
// message's requests (kMaxRequestsPerMessage) + the copies it may have in flight
// (maxOutstanding) completions.
constexpr size_t kPendingPauseAt = 4096;
constexpr size_t kPendingResumeAt = kPendingPauseAt / 2;

}  // namespace teshm
