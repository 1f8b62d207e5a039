// Target side of mooncake-shm (see server.h and docs/design/same-host.md).
#include "server.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "copy.h"
#include "server_state.h"
#include "te/descriptors.h"
#include "te/thread_policy.h"

namespace teshm {

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
  // Named for top, perf and /proc (te-shm-copy0.., te-shm-server; the initiator's is te-shm-client).
  for (uint32_t i = 0; i < opt_.copy_threads; ++i)
    copy_threads_.emplace_back([this, i] {
      pthread_setname_np(pthread_self(), ("te-shm-copy" + std::to_string(i)).c_str());
      copy_worker(i);
    });
  loop_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "te-shm-server");
    loop();
  });
  if (opt_.batch_scheduling) {
    // Every thread is asked; one warning names the first refusal (describe() shows the mix).
    std::string refused = te::schedule_as_batch(loop_thread_);
    for (auto& t : copy_threads_) {
      std::string r = te::schedule_as_batch(t);
      if (refused.empty()) refused = r;
    }
    if (!refused.empty())
      owner_->emit(
          Event{Event::LOG, 0, 0, "server or copy threads keep the default scheduling policy: " + refused, {}});
  }
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
    int n = epoll_wait(epoll_fd_, events, 64, accept_paused_ ? te::kDescriptorRetryMs : kSweepMs);
    drop_silent();
    resume_accepting();
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

// A connection that cannot be accepted for want of a descriptor (or of kernel memory) stays
// in the backlog and keeps the listener readable: accepting again at once would spin.
void Server::pause_accepting(int err) {
  if (!out_of_descriptors_) {
    out_of_descriptors_ = true;
    owner_->emit(Event{Event::LOG,
                       0,
                       0,
                       std::string("cannot accept connections (") + strerror(err) +
                           "): they wait in the backlog until descriptors are freed; raise the limit (ulimit -n) or "
                           "lower maxConnections",
                       {}});
  }
  epoll_event ev{};
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  accept_paused_ = true;
  accept_paused_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(te::kDescriptorRetryMs);
}

void Server::resume_accepting() {
  if (!accept_paused_ || std::chrono::steady_clock::now() < accept_paused_until_) return;
  accept_paused_ = false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
}

void Server::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (te::accept_starved(errno)) pause_accepting(errno);
      return;  // EAGAIN: the backlog is empty
    }
    out_of_descriptors_ = false;
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

// Whether a well-formed message may come now: HELLO first, then no initiator-bound type; a
// descriptor on HELLO (its control page) and POOL (its memfd) only, and always on those.
static Status fits_state(const Server::Conn& c, Type type, bool has_fd, std::string* why) {
  bool may_carry_fd = (!c.hello_done && type == HELLO) || (c.hello_done && type == POOL);
  if (has_fd && !may_carry_fd)
    *why = "a descriptor attached to a message other than HELLO or POOL";
  else if (!has_fd && type == POOL)
    *why = "POOL without its memfd";
  else if (!c.hello_done && type != HELLO)
    *why = "a message before HELLO";
  else if (c.hello_done && (type == HELLO || type == HELLO_REPLY || type == COMPLETIONS))
    *why = "an unexpected message type from an initiator";
  else
    return te::TE_OK;
  return te::TE_BAD_FRAME;
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
    if (s == te::TE_OK) s = fits_state(*c, m.type, got_fd >= 0, &why);
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
        c->any_cancelled.store(true, std::memory_order_release);
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
      case POOL:
        handle_pool(*c, m.pool, got_fd);
        close(got_fd);  // the mapping keeps the memory
        break;
      case POOL_GONE:
        c->pools.erase(m.pool.id);  // a copy still running holds its own reference
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

void Server::handle_pool(Conn& c, const PoolAd& ad, int fd) {
  std::string why;
  std::shared_ptr<PeerPool> mapped;
  if (c.pools.size() >= kMaxPoolsPerConnection && !c.pools.count(ad.id))
    why = "more than " + std::to_string(kMaxPoolsPerConnection) + " pools on one connection";
  else
    map_peer_pool(fd, ad.base, ad.len, &mapped, &why);
  if (mapped) {
    c.pools[ad.id] = std::move(mapped);
    return;
  }
  // Not fatal: requests naming this pool are copied with process_vm_* instead.
  c.pools.erase(ad.id);
  owner_->emit(Event{Event::LOG,
                     0,
                     0,
                     "pool " + std::to_string(ad.id) + " of pid " + std::to_string(c.cred.pid) +
                         " not mapped (its requests use process_vm_*): " + why,
                     {}});
}

std::shared_ptr<Server::Work> Server::take_work() {
  while (!spare_.empty()) {
    std::shared_ptr<Work> w = std::move(spare_.back());
    spare_.pop_back();
    // A copy thread that claimed an earlier chunk of a large request may not have let go of
    // it yet; such a Work is left to whichever holder lets go last.
    if (w.use_count() == 1) {
      // use_count() is a relaxed load: the fence orders the reset after the other holder's
      // last use of it, which its release of the reference published.
      std::atomic_thread_fence(std::memory_order_acquire);
      w->reset();
      return w;
    }
  }
  work_allocations_.fetch_add(1, std::memory_order_relaxed);
  return std::make_shared<Work>();
}

void Server::handle_requests(const std::shared_ptr<Conn>& c, const std::vector<Request>& reqs) {
  // A message's requests join the queue together: one lock of it per message, not per request.
  std::vector<std::shared_ptr<Work>>& admitted = admitted_;  // empty: emptied after every push below
  for (const Request& q : reqs) {
    if (c->outstanding.load() >= opt_.max_outstanding) {
      complete(*c, q.seq, te::TE_POOL_EXHAUSTED, false);
      continue;
    }
    if (te::range_overflows(q.initiator_addr, q.len)) {
      complete(*c, q.seq, te::TE_INVALID_ARGUMENT, false);
      continue;
    }
    std::shared_ptr<Work> w = take_work();
    // The target range must lie inside one remote-accessible region of this process.
    Status s = registry_.acquire(q.target_addr, q.len, true, w->lease);
    if (s != te::TE_OK) {
      complete(*c, q.seq, s, false);
      spare_.push_back(std::move(w));  // untouched: reused for the next request
      continue;
    }
    w->conn = c;
    w->req = q;
    if (q.pool != 0) {
      auto it = c->pools.find(q.pool);
      // A range outside the pool it names is copied with process_vm_*: the kernel checks it.
      if (it != c->pools.end() && it->second->holds(q.initiator_addr, q.len)) w->pool = it->second;
    }
    w->chunks = (q.len + opt_.chunk_bytes - 1) / opt_.chunk_bytes;
    c->outstanding.fetch_add(1);
    c->outstanding_bytes.fetch_add(q.len);
    admitted.push_back(std::move(w));
  }
  // Counted before `admitted` is emptied below: every request not admitted was answered above.
  const bool refused = admitted.size() != reqs.size();
  if (!admitted.empty()) {
    {
      std::lock_guard<std::mutex> lock(qmu_);
      for (auto& w : admitted) queue_.push_back(std::move(w));
      // Only the handover is done under the lock; sorting the returned Works into spare_ (and
      // freeing what it has no room for) is not. The two vectors trade places, so their
      // storage is kept and nothing is allocated.
      returned_.swap(handed_back_);
    }
    qcv_.notify_all();
    admitted.clear();
    for (auto& w : handed_back_)
      if (spare_.size() < kMaxSpareWork) spare_.push_back(std::move(w));
    handed_back_.clear();  // what spare_ had no room for is freed here, on this thread
  }
  // Refusals are answered now, and waiting completions while less than kHoldWhileQueued of
  // this connection's work is queued: a small window (a few batches of a few requests)
  // moves on as soon as its initiator hears, and this message is a moment to tell it. A
  // deeper one is answered as finish() decides: answering every message undid finish()'s
  // coalescing (64 KiB, batches of 16, 16 in flight: about one message per batch).
  std::lock_guard<std::mutex> lock(c->mu);
  if (refused || (!c->pending.empty() && c->outstanding_bytes.load() < kHoldWhileQueued)) flush_locked(*c);
}

}  // namespace teshm
