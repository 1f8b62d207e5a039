// Target side of mooncake-shm (see server.h and docs/design/same-host.md).
#include "server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "copy.h"

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
  std::mutex mu;  // guards everything below
  std::vector<Completion> pending;
  bool want_out = false;
  bool paused = false;  // reading this connection's messages is suspended (see kPendingPauseAt)
  std::unordered_set<uint64_t> cancelled;
  std::deque<uint64_t> cancel_order;

  bool is_cancelled(uint64_t batch) {
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

/** One request being copied; its chunks are claimed one by one by the copy threads. */
struct Server::Work {
  std::shared_ptr<Conn> conn;
  Request req;
  te::Lease lease;    // on the target range: unregisterMemory waits for it
  uint64_t next = 0;  // next chunk offset, under qmu_
  uint64_t chunks = 0;
  std::atomic<uint64_t> chunks_done{0};
  std::atomic<int32_t> status{0};
};

constexpr size_t kMaxCancelled = 4096;

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

Server::Server(Transport* owner, const Options& opt, te::MemoryRegistry& registry)
    : owner_(owner), opt_(opt), registry_(registry) {}

Server::~Server() { stop(); }

Status Server::start(std::string* err) {
  if (opt_.socket_name.empty()) return te::TE_OK;  // disabled: this process serves no peer
  Status s = listen_abstract(opt_.socket_name, 128, &listen_fd_, err);
  if (s != te::TE_OK) return s;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    *err = std::string("epoll/eventfd: ") + std::strerror(errno);
    return te::TE_INTERNAL;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (uint32_t i = 0; i < opt_.copy_threads; ++i) copy_threads_.emplace_back([this, i] { copy_worker(i); });
  loop_thread_ = std::thread([this] { loop(); });
  return te::TE_OK;
}

void Server::wake() {
  uint64_t one = 1;
  ssize_t r = write(wake_fd_, &one, sizeof one);
  (void)r;
}

void Server::stop() {
  if (stop_.exchange(true)) return;
  if (loop_thread_.joinable()) {
    wake();
    loop_thread_.join();
  }
  qcv_.notify_all();
  for (auto& t : copy_threads_) t.join();
  copy_threads_.clear();
  conns_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = epoll_fd_ = wake_fd_ = -1;
}

void Server::loop() {
  epoll_event events[64];
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events, 64, kSweepMs);
    drop_silent();
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof v) > 0) {
        }
        // Copy threads asked for EPOLLOUT on connections whose socket buffer was full.
        for (auto& [cfd, c] : conns_) {
          std::lock_guard<std::mutex> lock(c->mu);
          if (c->want_out) watch_locked(*c);
        }
        continue;
      }
      if (fd == listen_fd_) {
        accept_all();
        continue;
      }
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      std::shared_ptr<Conn> c = it->second;
      bool paused;
      {
        std::lock_guard<std::mutex> lock(c->mu);
        if (events[i].events & EPOLLOUT) {
          c->want_out = false;
          flush_locked(*c);
          if (c->paused && c->pending.size() < kPendingResumeAt) c->paused = false;  // drained: read again
          watch_locked(*c);
        }
        paused = c->paused;
      }
      if (paused) {
        // Not reading: a peer that hung up while paused is dropped here (EPOLLHUP is reported
        // whatever the interest set, and would otherwise be reported again and again).
        if (events[i].events & (EPOLLHUP | EPOLLERR)) drop(c, "");
        continue;
      }
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_conn(c);
    }
  }
}

// Connections that did not complete HELLO in time are closed.
void Server::drop_silent() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_sweep_ < std::chrono::milliseconds(kSweepMs)) return;
  last_sweep_ = now;
  std::vector<std::shared_ptr<Conn>> late;
  for (auto& [fd, c] : conns_)
    if (!c->hello_done && now - c->accepted_at > std::chrono::milliseconds(opt_.handshake_timeout_ms))
      late.push_back(c);
  for (auto& c : late) drop(c, "no HELLO within " + std::to_string(opt_.handshake_timeout_ms) + " ms");
}

void Server::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    std::vector<uint8_t> msg;
    HelloReply refuse;
    if (!peer_cred(fd, &c->cred)) {
      refuse.status = te::TE_AUTH_FAILED;
      refuse.message = "the target cannot read the connection's credentials (SO_PEERCRED)";
    } else if (c->cred.uid != geteuid()) {
      // The only authentication: the kernel's record of who connected. Another user's process
      // is refused before it can send a byte that is acted upon.
      refuse.status = te::TE_AUTH_FAILED;
      refuse.message = "uid " + std::to_string(c->cred.uid) + " refused: this target serves processes of uid " +
                       std::to_string(geteuid()) + " only";
    } else if (c->cred.pid <= 0) {
      refuse.status = te::TE_PEER_UNREACHABLE;
      refuse.message = "the initiator's pid is not visible from the target (another pid namespace)";
    } else if (conns_.size() >= opt_.max_connections) {
      refuse.status = te::TE_POOL_EXHAUSTED;
      refuse.message = "the target holds " + std::to_string(conns_.size()) + " connections (maxConnections)";
    }
    if (refuse.status != te::TE_OK) {
      encode_hello_reply(refuse, &msg);
      send_message(fd, msg);
      owner_->emit(Event{Event::LOG,
                         0,
                         0,
                         "refused a connection from pid " + std::to_string(c->cred.pid) + ": " + refuse.message,
                         {}});
      continue;  // ~Conn closes it
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    conns_[fd] = c;
  }
}

void Server::drop(const std::shared_ptr<Conn>& c, const std::string& why) {
  if (c->dead.exchange(true)) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  conns_.erase(c->fd);
  if (!why.empty())
    owner_->emit(
        Event{Event::LOG, 0, 0, "dropped the connection of pid " + std::to_string(c->cred.pid) + ": " + why, {}});
}

void Server::read_conn(const std::shared_ptr<Conn>& c) {
  std::vector<uint8_t> buf;
  Message m;
  for (int budget = 0; budget < 256 && !c->dead.load(); ++budget) {
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (c->pending.size() >= kPendingPauseAt) {
        // The peer does not read its completions: stop reading its messages (see kPendingPauseAt).
        c->paused = true;
        read_pauses_.fetch_add(1, std::memory_order_relaxed);
        watch_locked(*c);
        return;
      }
    }
    int got_fd = -1;
    bool truncated = false;
    ssize_t r = recv_message(c->fd, &buf, &got_fd, &truncated);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) return drop(c, "");  // the initiator went away
    std::string why;
    Status s = truncated ? te::TE_BAD_FRAME : parse_message(buf.data(), buf.size(), &m, &why);
    if (truncated) why = "message longer than 64 KiB";
    if (s == te::TE_OK && got_fd >= 0 && (c->hello_done || m.type != HELLO)) {
      s = te::TE_BAD_FRAME;
      why = "a descriptor attached to a message other than HELLO";
    }
    if (s == te::TE_OK && !c->hello_done && m.type != HELLO) {
      s = te::TE_BAD_FRAME;
      why = "a message before HELLO";
    }
    if (s == te::TE_OK && c->hello_done && (m.type == HELLO || m.type == HELLO_REPLY || m.type == COMPLETIONS)) {
      s = te::TE_BAD_FRAME;
      why = "an unexpected message type from an initiator";
    }
    if (s != te::TE_OK) {
      if (got_fd >= 0) close(got_fd);
      return drop(c, "malformed message: " + why);
    }
    switch (m.type) {
      case HELLO: {
        Status hs = handle_hello(*c, m.hello, got_fd, &why);
        if (got_fd >= 0) close(got_fd);  // the mapping keeps the control page alive
        HelloReply reply;
        reply.status = hs;
        reply.message = why;
        reply.max_outstanding = opt_.max_outstanding;
        std::vector<uint8_t> out;
        encode_hello_reply(reply, &out);
        if (send_message(c->fd, out) < 0 || hs != te::TE_OK) return drop(c, hs != te::TE_OK ? why : "");
        c->hello_done = true;
        break;
      }
      case REQUESTS:
        handle_requests(c, m.requests);
        break;
      case CANCEL: {
        std::lock_guard<std::mutex> lock(c->mu);
        if (c->cancelled.insert(m.cancel_batch).second) c->cancel_order.push_back(m.cancel_batch);
        // Bounded: a peer cancelling forever cannot grow the set; old batches are long finished.
        while (c->cancel_order.size() > kMaxCancelled) {
          c->cancelled.erase(c->cancel_order.front());
          c->cancel_order.pop_front();
        }
        break;
      }
      case NOTIFY:
        complete(*c, m.notify_seq, owner_->deliver_notification(c->name, std::move(m.notify)), true);
        break;
      default:
        break;
    }
  }
}

Status Server::handle_hello(Conn& c, const Hello& h, int ctl_fd, std::string* why) {
  if (ctl_fd < 0) {
    *why = "HELLO without its control page";
    return te::TE_BAD_FRAME;
  }
  if (h.expected_epoch != opt_.epoch) {
    *why = "the initiator expects epoch " + std::to_string(h.expected_epoch) + ", this process is epoch " +
           std::to_string(opt_.epoch) + " (a restarted segment: fetch its descriptor again)";
    return te::TE_STALE_DESCRIPTOR;
  }
  Status s = map_control_page(ctl_fd, &c.page, why);
  if (s != te::TE_OK) return s;
  // Prove that this process may read the initiator's memory before accepting any request.
  uint8_t seen[16];
  s = read_peer(c.cred.pid, h.probe_addr, seen, sizeof seen, why);
  if (s != te::TE_OK) return s;
  if (std::memcmp(seen, h.nonce, sizeof seen) != 0) {
    *why = "the initiator's probe does not hold its nonce (the connecting pid is not the process that sent HELLO?)";
    return te::TE_AUTH_FAILED;
  }
  c.pidfd = open_pidfd(c.cred.pid);
  c.name = h.name;
  return te::TE_OK;
}

void Server::handle_requests(const std::shared_ptr<Conn>& c, const std::vector<Request>& reqs) {
  bool queued = false;
  for (const Request& q : reqs) {
    if (c->outstanding.load() >= opt_.max_outstanding) {
      complete(*c, q.seq, te::TE_POOL_EXHAUSTED, false);
      continue;
    }
    if (te::range_overflows(q.initiator_addr, q.len)) {
      complete(*c, q.seq, te::TE_INVALID_ARGUMENT, false);
      continue;
    }
    auto w = std::make_shared<Work>();
    // The target range must lie inside one remote-accessible region of this process.
    Status s = registry_.acquire(q.target_addr, q.len, true, w->lease);
    if (s != te::TE_OK) {
      complete(*c, q.seq, s, false);
      continue;
    }
    w->conn = c;
    w->req = q;
    w->chunks = (q.len + opt_.chunk_bytes - 1) / opt_.chunk_bytes;
    c->outstanding.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(qmu_);
      queue_.push_back(std::move(w));
    }
    queued = true;
  }
  if (queued) qcv_.notify_all();
  std::lock_guard<std::mutex> lock(c->mu);
  flush_locked(*c);
}

void Server::copy_worker(uint32_t slot) {
  for (;;) {
    std::shared_ptr<Work> w;
    uint64_t off = 0, len = 0;
    bool last_queued = false;
    {
      std::unique_lock<std::mutex> lock(qmu_);
      qcv_.wait(lock, [this] { return stop_.load() || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      w = queue_.front();
      off = w->next;
      len = std::min<uint64_t>(opt_.chunk_bytes, w->req.len - off);
      w->next += len;
      if (w->next >= w->req.len) queue_.pop_front();
      last_queued = queue_.empty();
    }
    (void)last_queued;
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
    } else if (pidfd_exited(c.pidfd)) {
      st = te::TE_PEER_FAILED;  // never copy into a recycled pid
    } else if (!enter(c.page, slot)) {
      st = te::TE_CONNECTION_LOST;  // the initiator revoked the connection
    } else {
      st = copy_with_peer(c.cred.pid, w->req.op, w->req.target_addr + off, w->req.initiator_addr + off, len, &why);
      leave(c.page, slot);
    }
    if (st != te::TE_OK) {
      int32_t zero = te::TE_OK;
      w->status.compare_exchange_strong(zero, st);
    }
    if (w->chunks_done.fetch_add(1) + 1 == w->chunks) finish(*w);
  }
}

void Server::finish(Work& w) {
  w.lease.release();
  Conn& c = *w.conn;
  c.outstanding.fetch_sub(1);
  // Coalesce completions while more work is queued. The completion is queued before the
  // queue is looked at: a thread that finishes later sees it and sends it with its own, so
  // none is left behind when another thread emptied the queue in between.
  complete(c, w.req.seq, w.status.load(), false);
  bool idle;
  {
    std::lock_guard<std::mutex> lock(qmu_);
    idle = queue_.empty();
  }
  if (idle) {
    std::lock_guard<std::mutex> lock(c.mu);
    flush_locked(c);
  }
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
  std::vector<uint8_t> out;
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
    at += n;
  }
  c.pending.erase(c.pending.begin(), c.pending.begin() + static_cast<long>(at));
}

}  // namespace teshm
