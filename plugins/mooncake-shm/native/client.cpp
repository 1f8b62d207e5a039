// Initiator side of mooncake-shm (see client.h and docs/design/same-host.md).
#include "client.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "client_peer.h"
#include "te/thread_policy.h"

namespace teshm {

/** Failures a new connection would meet again: the peer must be opened afresh from a new descriptor. */
static bool sticky(int32_t status) {
  return status == te::TE_STALE_DESCRIPTOR || status == te::TE_AUTH_FAILED || status == te::TE_PROTOCOL_MISMATCH;
}

Client::Client(Transport* owner, const Options& opt, te::MemoryRegistry& registry, const LocalPools& pools)
    : owner_(owner), opt_(opt), registry_(registry), pools_(pools) {}

Client::~Client() { stop(); }

Status Client::start(std::string* err) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    *err = std::string("epoll/eventfd: ") + std::strerror(errno);
    return te::TE_INTERNAL;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "te-shm-client");
    loop();
  });
  std::string refused = opt_.batch_scheduling ? te::schedule_as_batch(thread_) : std::string();
  if (!refused.empty())
    owner_->emit(Event{Event::LOG, 0, 0, "the client thread keeps the default scheduling policy: " + refused, {}});
  return te::TE_OK;
}

void Client::wake() {
  uint64_t one = 1;
  ssize_t r = write(wake_fd_, &one, sizeof one);
  (void)r;
}

void Client::stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Fence every connection, then wait (bounded) until no target copies into this process.
  // Walked over a copy: failing a peer its user already closed erases it from peers_.
  std::vector<std::shared_ptr<Peer>> peers;
  peers.reserve(peers_.size());
  for (auto& [id, p] : peers_) peers.push_back(p);
  int64_t deadline = now_ms() + 2000;
  for (auto& p : peers) {
    if (p->page) revoke(p->page);
  }
  for (auto& p : peers) {
    while (p->page && !quiescent(p->page, kMaxCopyThreads) && !pidfd_exited(p->pidfd) && now_ms() < deadline)
      usleep(1000);
    if (p->page && !quiescent(p->page, kMaxCopyThreads) && !pidfd_exited(p->pidfd))
      owner_->emit(
          Event{Event::LOG, 0, 0, "closing while " + p->label() + " is stopped inside a copy into this process", {}});
    fail_locked(*p, te::TE_ABORTED, "transport closed");
  }
  peers_.clear();
  by_fd_.clear();
  for (auto& [id, b] : batches_) {
    if (b->remaining != 0) {
      b->remaining = 0;
      if (!b->batch_status) b->batch_status = te::TE_ABORTED;
      owner_->emit(Event{Event::BATCH, id, 0, "", {}});
    }
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

uint64_t Client::open_peer(const std::string& socket_name, uint64_t epoch, const std::string& segment) {
  auto p = std::make_shared<Peer>();
  std::random_device rd;
  for (auto& b : p->nonce) b = static_cast<uint8_t>(rd());
  p->socket_name = socket_name;
  p->segment = segment;
  p->epoch = epoch;
  p->open_deadline = now_ms() + opt_.connect_timeout_ms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p->id = next_peer_++;
    peers_[p->id] = p;
  }
  wake();  // the loop connects
  return p->id;
}

void Client::close_peer(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  Peer& p = *it->second;
  p.closed_by_user = true;
  if (p.state == Peer::FAILED) {
    peers_.erase(it);
    return;
  }
  revoke_locked(p, te::TE_CONNECTION_LOST, "the peer was closed");
  wake();
}

void Client::arm_locked(Peer& p, bool out) {
  if (p.fd < 0 || p.want_out == out) return;
  p.want_out = out;
  epoll_event ev{};
  ev.events = EPOLLIN | (out ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.fd = p.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, p.fd, &ev);
}

void Client::flush_locked(Peer& p) {
  if (p.state != Peer::OPEN) return;
  std::vector<uint8_t>& msg = p.out_msg;
  std::vector<Request>& reqs = p.out_reqs;
  std::vector<uint64_t>& tokens = p.out_tokens;
  while (!p.unsent.empty() && p.inflight.size() < p.window) {
    if (p.unsent.front().index == kPool || p.unsent.front().index == kPoolGone) {
      if (!send_control_locked(p)) return;
      continue;
    }
    size_t room = std::min<size_t>(kMaxRequestsPerMessage, p.window - p.inflight.size());
    reqs.clear();
    tokens.clear();
    // What this message carries moves to `inflight` first: its sequence numbers are the tokens.
    if (p.unsent.front().index == kNotify) {
      uint64_t t = p.inflight.put(std::move(p.unsent.front()));
      p.unsent.pop_front();
      tokens.push_back(t);
      Pending& n = *p.inflight.find(t);
      n.req.seq = t;
      encode_notify(t, n.batch->notify.data(), n.batch->notify.size(), &msg);
    } else {
      while (!p.unsent.empty() && reqs.size() < room && is_request(p.unsent.front())) {
        uint64_t t = p.inflight.put(std::move(p.unsent.front()));
        p.unsent.pop_front();
        tokens.push_back(t);
        Pending& q = *p.inflight.find(t);
        q.req.seq = t;
        reqs.push_back(q.req);
      }
      encode_requests(reqs.data(), reqs.size(), &msg);
    }
    if (send_message(p.fd, msg) < 0) {
      const int e = errno;
      // Not sent: back to the head of `unsent`, in their order.
      for (size_t i = tokens.size(); i-- > 0;) {
        Pending q;
        p.inflight.take(tokens[i], &q);
        p.unsent.push_front(std::move(q));
      }
      if (e == EAGAIN || e == EWOULDBLOCK) return arm_locked(p, true);
      // The target closed its end: its end-of-stream (read next) fails the peer once it is safe.
      return revoke_locked(p, te::TE_CONNECTION_LOST, std::string("sending to the target: ") + std::strerror(e));
    }
  }
  arm_locked(p, false);
}

bool Client::send_control_locked(Peer& p) {
  Pending& head = p.unsent.front();
  std::vector<uint8_t> msg;
  int fd = -1;
  if (head.index == kPool) {
    encode_pool(PoolAd{head.pool->id, head.pool->base, head.pool->len}, &msg);
    fd = head.pool->fd;
  } else {
    encode_pool_gone(head.req.pool, &msg);
  }
  if (send_message(p.fd, msg, fd) < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      arm_locked(p, true);
    } else {
      revoke_locked(p, te::TE_CONNECTION_LOST, std::string("sending to the target: ") + std::strerror(errno));
    }
    return false;
  }
  p.unsent.pop_front();
  return true;
}

void Client::tag_pool_locked(Peer& p, Request& req) {
  std::shared_ptr<LocalPool> pool = pools_.find(req.initiator_addr, req.len);
  if (!pool) return;
  req.pool = pool->id;
  if (!p.announced.insert(pool->id).second) return;
  Pending a;
  a.index = kPool;
  a.pool = std::move(pool);
  p.unsent.push_back(std::move(a));  // ahead of the request: the target maps it first
}

void Client::forget_pool(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [pid, pp] : peers_) {
    Peer& p = *pp;
    if (!p.announced.erase(id) || p.state == Peer::FAILED) continue;
    Pending g;
    g.index = kPoolGone;
    g.req.pool = id;
    p.unsent.push_back(std::move(g));
    flush_locked(p);
  }
}

Status Client::submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                      const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len, uint64_t* batch_id,
                      std::string* err) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end() || it->second->closed_by_user) {
    *err = "unknown or closed peer " + std::to_string(peer);
    return te::TE_PEER_NOT_FOUND;
  }
  Peer& p = *it->second;
  if (p.state == Peer::FAILED && !sticky(p.failure)) {
    // A lost or revoked connection is made again; this batch waits in `unsent` until then.
    p.state = Peer::CONNECTING;
    p.failure = 0;
    p.open_deadline = now_ms() + opt_.connect_timeout_ms;
    wake();
  }
  if (p.state == Peer::FAILED || p.state == Peer::REVOKING) {
    *err = p.failure ? p.failure_msg : "the connection to " + p.label() + " is being revoked";
    return p.failure ? static_cast<Status>(p.failure) : te::TE_CONNECTION_LOST;
  }
  auto b = std::make_shared<Batch>();
  b->id = next_batch_++;
  b->peer = peer;
  b->n = n;
  b->lengths.assign(lengths, lengths + n);
  b->statuses.reset(new std::atomic<int32_t>[n ? n : 1]);
  b->leases.resize(n);
  b->has_notify = notify != nullptr;
  if (notify) b->notify.assign(notify, notify + notify_len);
  for (size_t i = 0; i < n; ++i) {
    b->statuses[i].store(te::TE_OK);
    Status s = te::TE_OK;
    if (ops[i] != OP_READ && ops[i] != OP_WRITE)
      s = te::TE_INVALID_ARGUMENT;
    else if (lengths[i] == 0 || te::range_overflows(remote[i], lengths[i]))
      s = te::TE_INVALID_ARGUMENT;
    // Local ranges are this process's to check: any registered region, remote access or not.
    else
      s = registry_.acquire(local[i], lengths[i], false, b->leases[i]);
    if (s != te::TE_OK) {
      b->statuses[i].store(s);
      continue;
    }
    Pending q;
    q.batch = b;
    q.index = i;
    q.req = Request{0, b->id, ops[i], local[i], remote[i], lengths[i]};  // seq: given when sent
    tag_pool_locked(p, q.req);
    p.unsent.push_back(std::move(q));
    b->remaining++;
  }
  batches_[b->id] = b;
  *batch_id = b->id;
  if (b->remaining == 0) {
    settle_or_notify_locked(p, b);  // nothing to send: maybe the notification alone
  } else {
    flush_locked(p);
  }
  return te::TE_OK;
}

void Client::complete_locked(Peer& p, const std::shared_ptr<Batch>& b, size_t index, int32_t status) {
  if (index == kNotify) {
    if (status != te::TE_OK && b->batch_status == te::TE_OK) {
      b->batch_status = status;
      b->error = "the notification to " + p.label() + " failed: " + te::status_name(status);
    }
    if (b->remaining > 0) b->remaining--;
  } else {
    b->statuses[index].store(status);
    b->leases[index].release();
    if (b->remaining > 0) b->remaining--;
  }
  if (b->remaining == 0) settle_or_notify_locked(p, b);
}

void Client::settle_or_notify_locked(Peer& p, const std::shared_ptr<Batch>& b) {
  bool all_ok = true;
  for (size_t i = 0; i < b->n; ++i) all_ok = all_ok && b->statuses[i].load() == te::TE_OK;
  // The notification goes only after every byte of its batch landed.
  if (b->has_notify && !b->notify_queued && all_ok && b->cancel_status == 0 && b->batch_status == 0 &&
      p.state == Peer::OPEN) {
    b->notify_queued = true;
    b->remaining = 1;
    Pending q;
    q.batch = b;
    q.index = kNotify;
    p.unsent.push_back(std::move(q));
    flush_locked(p);
    return;
  }
  finish_locked(b);
}

void Client::finish_locked(const std::shared_ptr<Batch>& b) {
  cancelling_.erase(b->id);
  owner_->emit(Event{Event::BATCH, b->id, 0, "", {}});
}

std::shared_ptr<Batch> Client::take_batch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end() || it->second->remaining != 0) return nullptr;
  auto b = it->second;
  batches_.erase(it);
  return b;
}

void Client::cancel(uint64_t id, int32_t status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto bit = batches_.find(id);
  if (bit == batches_.end() || bit->second->remaining == 0 || bit->second->cancel_status != 0) return;
  std::shared_ptr<Batch> b = bit->second;
  b->cancel_status = status;
  auto pit = peers_.find(b->peer);
  if (pit == peers_.end()) return;
  Peer& p = *pit->second;
  // What was not sent yet is failed at once; what the target holds is cancelled there.
  std::deque<Pending> keep;
  std::vector<Pending> dropped;
  for (Pending& q : p.unsent) {
    if (q.batch == b)
      dropped.push_back(std::move(q));
    else
      keep.push_back(std::move(q));
  }
  p.unsent.swap(keep);
  bool at_target = false;
  p.inflight.for_each([&](const Pending& q) { at_target = at_target || q.batch == b; });
  if (at_target && p.state == Peer::OPEN) {
    std::vector<uint8_t> msg;
    encode_cancel(b->id, &msg);
    send_message(p.fd, msg);  // best effort: the grace deadline below covers a target that does not answer
    b->cancel_deadline = now_ms() + opt_.cancel_grace_ms;
    cancelling_.insert(b->id);
    wake();
  }
  for (Pending& q : dropped) complete_locked(p, b, q.index, status);
}

void Client::revoke_locked(Peer& p, int32_t status, const std::string& why) {
  if (p.state == Peer::FAILED || p.state == Peer::REVOKING) return;
  if (!p.page || p.state != Peer::OPEN) return fail_locked(p, status, why);
  revoke(p.page);
  p.state = Peer::REVOKING;
  p.revoke_status = status;
  p.revoke_msg = why;
}

void Client::fail_locked(Peer& p, int32_t status, const std::string& why) {
  if (p.state == Peer::FAILED) return;
  bool was_open = p.state == Peer::OPEN || p.state == Peer::REVOKING;
  p.state = Peer::FAILED;
  p.failure = status;
  p.failure_msg = why;
  if (p.fd >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.fd, nullptr);
    by_fd_.erase(p.fd);
    close(p.fd);
    p.fd = -1;
  }
  if (p.ctl_fd >= 0) close(p.ctl_fd);
  p.ctl_fd = -1;
  unmap_control_page(p.page);
  p.page = nullptr;
  if (p.pidfd >= 0) close(p.pidfd);
  p.pidfd = -1;
  if (!p.open_reported) {
    p.open_reported = true;
    owner_->emit(Event{Event::OPEN, p.id, status, why, {}});
  }
  (void)was_open;
  std::vector<Pending> all;
  for (Pending& q : p.unsent) all.push_back(std::move(q));
  p.inflight.drain(&all);
  p.unsent.clear();
  p.announced.clear();  // the next connection's target has mapped nothing
  for (Pending& q : all) {
    if (q.index == kPool || q.index == kPoolGone) continue;
    auto& b = q.batch;
    if (b->cancel_status == 0 && b->batch_status == 0) {
      b->batch_status = status;
      b->error = why;
    }
    complete_locked(p, b, q.index, b->cancel_status ? b->cancel_status : status);
  }
  if (p.closed_by_user) peers_.erase(p.id);
}

int Client::timers_locked() {
  int64_t now = now_ms();
  int wait = 1000;
  for (auto it = peers_.begin(); it != peers_.end();) {
    std::shared_ptr<Peer> p = it->second;
    ++it;
    if (p->state == Peer::CONNECTING) connect_locked(*p);
    if (p->state == Peer::HELLO_SENT) {
      if (now >= p->open_deadline)
        fail_locked(*p, te::TE_PEER_UNREACHABLE, "target " + p->label() + " did not answer HELLO in time");
      else
        wait = std::min<int>(wait, static_cast<int>(p->open_deadline - now));
    }
    if (p->state == Peer::REVOKING) {
      if (quiescent(p->page, kMaxCopyThreads) || pidfd_exited(p->pidfd))
        fail_locked(*p, p->revoke_status, p->revoke_msg);
      else
        wait = 1;  // the target is inside a copy: look again soon
    }
  }
  for (auto it = cancelling_.begin(); it != cancelling_.end();) {
    auto bit = batches_.find(*it);
    if (bit == batches_.end() || bit->second->remaining == 0) {
      it = cancelling_.erase(it);
      continue;
    }
    auto b = bit->second;
    ++it;
    if (now >= b->cancel_deadline) {
      auto pit = peers_.find(b->peer);
      if (pit != peers_.end())
        revoke_locked(*pit->second, te::TE_CONNECTION_LOST,
                      "the connection to " + pit->second->label() +
                          " was revoked: a cancelled batch was not answered within cancelGraceMs");
      wait = 1;
    } else {
      wait = std::min<int>(wait, static_cast<int>(b->cancel_deadline - now));
    }
  }
  return wait;
}

void Client::loop() {
  epoll_event events[64];
  int wait = 0;
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events, 64, wait);
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof v) > 0) {
        }
        continue;
      }
      auto it = by_fd_.find(fd);
      if (it == by_fd_.end()) continue;
      std::shared_ptr<Peer> p = it->second;
      if (events[i].events & EPOLLOUT) flush_locked(*p);
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_peer_locked(p);
    }
    wait = timers_locked();
  }
}

}  // namespace teshm
