#include "initiator.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "wire.h"

namespace mcwire {

namespace {

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

/** A kept connection with nothing to read and no end of stream: a target sends nothing unasked. */
bool idle_and_open(int fd) {
  uint8_t b;
  ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

bool inside_one(const std::vector<std::pair<uint64_t, uint64_t>>& buffers, uint64_t addr, uint64_t len) {
  for (auto& [base, size] : buffers)
    if (te::range_within(base, size, addr, len)) return true;
  return false;
}

/** Fails request `i` of a cancelled, timed-out or stopped batch, saying `during` what. */
void fail_stopped(Batch& b, size_t i, const char* during) {
  int32_t c = b.cancel_status.load();
  b.fail(i, c != 0 ? c : te::TE_ABORTED, std::string(c == te::TE_TIMEOUT ? "timed out" : "cancelled") + " " + during);
}

// One request's exchange over a connected lane's socket: the header, then the body and its
// acknowledgement (WRITE) or the status and the data (READ). A failure fails the request
// with its status and drops the connection.
class Exchange {
 public:
  Exchange(const PeerOptions& peer, int& fd, Batch& b, size_t i, SocketStream& s, int io_ms)
      : peer_(peer),
        fd_(fd),
        b_(b),
        i_(i),
        s_(s),
        io_ms_(io_ms),
        write_(b.ops[i] == kOpWrite),
        local_(b.local[i]),
        remote_(b.remote[i]),
        len_(b.lengths[i]),
        where_(peer.host + ":" + std::to_string(peer.port)) {}

  /** True when the request succeeded; the connection is then still open. */
  bool run() {
    Header h{len_, remote_, write_, peer_.v2};
    uint8_t hb[kHeaderBytes];
    encode_header(h, hb);
    Io io = s_.write_all(hb, sizeof hb);
    if (io != Io::OK) return broken(io, "sending the request header");
    return write_ ? send_body() : receive_data();
  }

  void drop() {
    ::close(fd_);
    fd_ = -1;
  }

 private:
  bool send_body() {
    Io io = s_.write_all(reinterpret_cast<const void*>(local_), len_);
    if (io != Io::OK) {
      // An early rejection closes the connection under the body: report it as what it is.
      uint64_t st = 0;
      if (peer_.v2 && io == Io::LOST && s_.readable_now() && read_status(&st) == Io::OK && st == kStatusAddrRejected)
        return check_status(st);
      return broken(io, "sending the body");
    }
    if (!peer_.v2) return fence();
    uint64_t st = 0;
    io = read_status(&st);
    if (io != Io::OK) return broken(io, "waiting for the acknowledgement");
    return check_status(st);
  }

  // The legacy framing acknowledges nothing. A target serves a connection's requests in
  // order, so a 1-byte READ of the range just written comes back only after the body was
  // applied: success then means the bytes are in the target's memory, not just sent.
  bool fence() {
    Header fence{1, remote_ + len_ - 1, false, false};
    uint8_t fb[kHeaderBytes], byte = 0;
    encode_header(fence, fb);
    Io io = s_.write_all(fb, sizeof fb);
    if (io == Io::OK) io = s_.read_exact(&byte, 1, false);
    if (io != Io::OK) return broken(io, "waiting for the legacy-framing fence after the body");
    return true;
  }

  bool receive_data() {
    if (peer_.v2) {
      uint64_t st = 0;
      Io io = read_status(&st);
      if (io != Io::OK) return broken(io, "waiting for the status");
      if (!check_status(st)) return false;
    }
    Io io = s_.read_exact(reinterpret_cast<void*>(local_), len_, false);
    if (io != Io::OK) return broken(io, "receiving the data");
    return true;
  }

  /** Maps a failed read or write of this request to its status, and drops the connection; false. */
  bool broken(Io io, const char* during) {
    drop();
    bool body_sent = write_ && s_.sent() > kHeaderBytes;
    if (body_sent) b_.may_be_written.store(true);
    if (io == Io::STOPPED) {
      fail_stopped(b_, i_, during);
    } else if (io == Io::TIMEOUT && Clock::now() >= b_.deadline) {
      b_.fail(i_, te::TE_TIMEOUT, std::string("timed out ") + during);
    } else {
      std::string e = io == Io::TIMEOUT ? "no progress for " + std::to_string(io_ms_) + " ms" : s_.error();
      b_.fail(
          i_, te::TE_CONNECTION_LOST,
          where_ + ": " + e + " " + during +
              (!peer_.v2 ? " (a target speaking the legacy framing closes the connection to refuse a request)" : ""));
    }
    return false;
  }

  Io read_status(uint64_t* st) {
    uint8_t f[kStatusBytes];
    Io io = s_.read_exact(f, sizeof f, false);
    if (io == Io::OK) *st = decode_status(f);
    return io;
  }

  /** True for a success status; otherwise the request fails and the connection is dropped. */
  bool check_status(uint64_t st) {
    if (st == kStatusOk) return true;
    drop();
    if (st == kStatusAddrRejected) {
      b_.fail(i_, te::TE_ADDRESS_OUT_OF_RANGE,
              where_ + " rejected the range " + hex(remote_) + "+" + std::to_string(len_) +
                  " (outside its registered memory)");
    } else {
      if (write_) b_.may_be_written.store(true);
      b_.fail(i_, te::TE_BAD_FRAME, where_ + " answered a status frame without the MCTV magic (" + hex(st) + ")");
    }
    return false;
  }

  const PeerOptions& peer_;
  int& fd_;
  Batch& b_;
  size_t i_;
  SocketStream& s_;
  int io_ms_;
  bool write_;
  uint64_t local_, remote_, len_;
  std::string where_;
};

}  // namespace

void Batch::fail(size_t i, int32_t status, const std::string& why) {
  statuses[i].store(status);
  std::lock_guard<std::mutex> l(mu);
  if (error.empty()) error = "request " + std::to_string(i) + ": " + why;
}

uint64_t Initiator::open_peer(const PeerOptions& po) {
  auto p = std::make_shared<Peer>();
  p->o = po;
  if (p->o.lanes == 0) p->o.lanes = 1;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_peer_++;
  for (uint32_t i = 0; i < p->o.lanes; ++i) {
    p->lanes.push_back(std::make_unique<Lane>());
    Lane* l = p->lanes.back().get();
    Peer* raw = p.get();
    l->thread = std::thread([this, raw, l] { run_lane(*raw, *l); });
  }
  peers_[id] = std::move(p);
  return id;
}

void Initiator::stop_peer(Peer& p) {
  for (auto& l : p.lanes) {
    std::lock_guard<std::mutex> g(l->mu);
    l->stop = true;
    l->cv.notify_all();
  }
  for (auto& l : p.lanes)
    if (l->thread.joinable()) l->thread.join();
}

void Initiator::close_peer(uint64_t id) {
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    p = it->second;
    peers_.erase(it);
  }
  stop_peer(*p);
}

void Initiator::close() {
  std::map<uint64_t, std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    peers.swap(peers_);
  }
  for (auto& [id, p] : peers) stop_peer(*p);
}

te::Status Initiator::submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                             const uint64_t* lengths, size_t n, uint64_t timeout_ms, uint64_t* id, std::string* err) {
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      *err = "transport is closed";
      return te::TE_ABORTED;
    }
    auto it = peers_.find(peer);
    if (it == peers_.end()) {
      *err = "peer " + std::to_string(peer) + " is not open";
      return te::TE_PEER_NOT_FOUND;
    }
    p = it->second;
  }
  // Reserved for the whole batch at once, so concurrent submits cannot overshoot the bound;
  // each request gives its place back when it is terminal.
  if (queued_.fetch_add(n) + n > o_.max_queued) {
    queued_.fetch_sub(n);
    *err = "more than " + std::to_string(o_.max_queued) + " requests would be queued (maxQueued)";
    return te::TE_POOL_EXHAUSTED;
  }
  auto b = std::make_shared<Batch>();
  b->n = n;
  b->ops.assign(ops, ops + n);
  b->local.assign(local, local + n);
  b->remote.assign(remote, remote + n);
  b->lengths.assign(lengths, lengths + n);
  b->statuses.reset(new std::atomic<int32_t>[n]);
  b->deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  b->remaining.store(n + 1);  // +1 held until every request is queued
  {
    std::lock_guard<std::mutex> lock(mu_);
    b->id = next_batch_++;
    batches_[b->id] = b;
  }
  *id = b->id;
  for (size_t i = 0; i < n; ++i) {
    b->statuses[i].store(te::TE_OK);
    if (lengths[i] == 0) {  // nothing to move: done here, as the reference initiator does
      queued_--;
      finish(*b);
      continue;
    }
    if (te::range_overflows(local[i], lengths[i]) || te::range_overflows(remote[i], lengths[i])) {
      b->fail(i, te::TE_INVALID_ARGUMENT, "range wraps around the address space");
      queued_--;
      finish(*b);
      continue;
    }
    te::Status s = registry_.check(local[i], lengths[i], false);
    if (s != te::TE_OK) {
      b->fail(i, s,
              "local range " + hex(local[i]) + "+" + std::to_string(lengths[i]) + " is not inside registered memory");
      queued_--;
      finish(*b);
      continue;
    }
    // The peer validates too, but a range outside what it published is never sent.
    if (!inside_one(p->o.buffers, remote[i], lengths[i])) {
      b->fail(i, te::TE_ADDRESS_OUT_OF_RANGE,
              "remote range " + hex(remote[i]) + "+" + std::to_string(lengths[i]) +
                  " is not inside one buffer the peer published");
      queued_--;
      finish(*b);
      continue;
    }
    Lane& l = *p->lanes[p->next.fetch_add(1) % p->lanes.size()];
    std::lock_guard<std::mutex> g(l.mu);
    l.queue.emplace_back(b, i);
    l.cv.notify_one();
  }
  finish(*b);
  return te::TE_OK;
}

void Initiator::finish(Batch& b) {
  if (b.remaining.fetch_sub(1) == 1) on_batch_(b.id);
}

void Initiator::cancel(uint64_t batch, int32_t status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = batches_.find(batch);
  if (it == batches_.end()) return;
  int32_t expected = 0;
  it->second->cancel_status.compare_exchange_strong(expected, status);
}

std::shared_ptr<Batch> Initiator::take_batch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return nullptr;
  auto b = it->second;
  batches_.erase(it);
  return b;
}

void Initiator::run_lane(Peer& p, Lane& l) {
  for (;;) {
    std::pair<std::shared_ptr<Batch>, size_t> item;
    bool stopping;
    {
      std::unique_lock<std::mutex> g(l.mu);
      l.cv.wait(g, [&] { return l.stop || !l.queue.empty(); });
      stopping = l.stop;
      if (l.queue.empty()) break;
      item = std::move(l.queue.front());
      l.queue.pop_front();
    }
    Batch& b = *item.first;
    if (stopping)
      b.fail(item.second, te::TE_ABORTED, "the peer was closed");
    else
      execute(p, l, b, item.second);
    queued_--;
    finish(b);
  }
  if (l.fd >= 0) ::close(l.fd);
  l.fd = -1;
}

void Initiator::execute(Peer& p, Lane& l, Batch& b, size_t i) {
  auto stopped = [&] { return b.cancel_status.load(std::memory_order_relaxed) != 0 || l.stop; };
  if (stopped()) return fail_stopped(b, i, "before it was sent");
  if (Clock::now() >= b.deadline) return b.fail(i, te::TE_TIMEOUT, "deadline passed before it was sent");
  te::Lease lease;
  te::Status ls = registry_.acquire(b.local[i], b.lengths[i], false, lease);
  if (ls != te::TE_OK) return b.fail(i, ls, "local memory was unregistered");
  if (!connect_lane(p, l, b, i, stopped)) return;
  SocketStream s(l.fd, o_.io_ms, o_.io_ms, stopped, b.deadline);
  Exchange x(p.o, l.fd, b, i, s, o_.io_ms);
  if (x.run() && !p.o.pool) x.drop();
}

bool Initiator::connect_lane(Peer& p, Lane& l, Batch& b, size_t i, const std::function<bool()>& stopped) {
  if (l.fd >= 0 && !idle_and_open(l.fd)) {
    // The target closed the kept connection while it was idle (its idle timeout, a restart):
    // a new one, rather than a request sent into a dead socket.
    ::close(l.fd);
    l.fd = -1;
  }
  if (l.fd >= 0) return true;
  std::string err;
  auto until = std::min(b.deadline, Clock::now() + std::chrono::milliseconds(o_.connect_ms));
  l.fd = connect_to(p.o.host, p.o.port, until, stopped, &err);
  if (l.fd < 0) {
    if (stopped())
      fail_stopped(b, i, "while connecting");
    else if (Clock::now() >= b.deadline)
      b.fail(i, te::TE_TIMEOUT, err);
    else
      b.fail(i, te::TE_PEER_UNREACHABLE, err);
    return false;
  }
  connects_++;
  return true;
}

}  // namespace mcwire
