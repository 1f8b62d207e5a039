#include "transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lane.h"
#include "listener.h"
#include "server_conn.h"
#include "te/slice_plan.h"

namespace tetcp {

void tune_socket(int fd, const Options& o) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o.socket_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.socket_buffer, sizeof o.socket_buffer);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.socket_buffer, sizeof o.socket_buffer);
  }
  // Checked on the listener at start (Transport::start): it cannot be refused here.
  if (!o.congestion.empty()) set_congestion(fd, o.congestion, nullptr);
}

bool set_congestion(int fd, const std::string& name, std::string* err) {
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0) return true;
  if (err) *err = strerror(errno);
  return false;
}

// ---------------------------------------------------------------- Batch

void Batch::note_error(const std::string& why) {
  std::lock_guard<std::mutex> lock(err_mu);
  if (error.empty()) error = why;
}

void Batch::complete(Slice* s, int32_t status, const char* why) {
  if (status != te::TE_OK) {
    if (s->req == kNotifyRequest) {
      int32_t expected = 0;
      batch_status.compare_exchange_strong(expected, status);
    } else {
      int32_t expected = 0;
      statuses[s->req].compare_exchange_strong(expected, status);
    }
    if (why && *why) note_error(why);
  }
  if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) all_done();
}

void Batch::all_done() {
  if (has_notify && !notify_sent.exchange(true) && !cancelled() && batch_status.load() == 0) {
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) ok = statuses[i].load() == te::TE_OK;
    if (ok && !peer->local) {
      remaining.store(1);
      peer->lanes[0]->enqueue(&notify_slice);
      return;
    }
    if (ok && peer->local) {
      int32_t st = owner->deliver_notification(owner->options().segment_name, notify);
      if (st != te::TE_OK) {
        batch_status.store(st);
        note_error("this process's notification queue is full (notifyQueuePerPeer / notifyQueueBytes)");
      }
    }
  }
  owner->finish_batch(this);
}

// ---------------------------------------------------------------- Peer

std::string Peer::label() const {
  return (name.empty() ? std::string("?") : name) + " (" + host + ":" + std::to_string(port) + ")";
}

void Peer::lane_opened(int32_t status, const std::string& msg) {
  uint64_t id = 0;
  int32_t st = 0;
  std::string m;
  {
    std::lock_guard<std::mutex> lock(open_mu);
    if (open_pending == 0) return;
    if (status != te::TE_OK && open_status == te::TE_OK) {
      open_status = status;
      open_msg = msg;
    }
    if (--open_pending > 0) return;
    id = open_id;
    st = open_status;
    m = open_msg;
  }
  Event e;
  e.kind = Event::OPEN;
  e.id = id;
  e.status = st;
  e.text = m;
  owner->emit(std::move(e));
}

void Peer::set_sticky(int32_t status, const std::string& msg) {
  std::lock_guard<std::mutex> lock(sticky_mu);
  if (sticky.load() != 0) return;
  sticky_msg = msg;
  sticky.store(status);
}

int32_t Peer::sticky_failure(std::string* msg) const {
  if (sticky.load() == 0) return 0;  // fast path: no lock while the peer is healthy
  std::lock_guard<std::mutex> lock(sticky_mu);
  *msg = sticky_msg;
  return sticky.load();
}

Peer::~Peer() {
  for (Lane* l : lanes) delete l;
}

// ---------------------------------------------------------------- Transport

Transport::Transport(Options o, EventSink sink) : opt_(std::move(o)), sink_(std::move(sink)) {
  if (opt_.io_threads < 1) opt_.io_threads = 1;
  if (opt_.lanes < 1) opt_.lanes = 1;
  if (opt_.slice_size == 0) opt_.slice_size = 1 << 20;
}

Transport::~Transport() { close(); }

Status Transport::start(std::string* err) {
  sockaddr_storage sa{};
  socklen_t salen;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&sa);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&sa);
  if (inet_pton(AF_INET, opt_.bind_address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(opt_.port);
    salen = sizeof *v4;
  } else if (inet_pton(AF_INET6, opt_.bind_address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(opt_.port);
    salen = sizeof *v6;
  } else {
    *err = "bind address " + opt_.bind_address + " is not an IPv4/IPv6 literal";
    return te::TE_INVALID_ARGUMENT;
  }
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = std::string("socket(): ") + strerror(errno);
    return te::TE_INTERNAL;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (opt_.socket_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &opt_.socket_buffer, sizeof opt_.socket_buffer);
  // The congestion control is tried on the listener first: a name the kernel refuses fails
  // the start, with the kernel's reason, rather than every connection later.
  std::string why;
  if (!opt_.congestion.empty() && !set_congestion(fd, opt_.congestion, &why)) {
    *err = "congestionControl '" + opt_.congestion + "' was refused by the kernel: " + why +
           " (the algorithms it has: /proc/sys/net/ipv4/tcp_available_congestion_control; a process without "
           "CAP_NET_ADMIN may use only those in net.ipv4.tcp_allowed_congestion_control)";
    ::close(fd);
    return te::TE_INVALID_ARGUMENT;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), salen) < 0 || listen(fd, 512) < 0) {
    *err = "cannot listen on " + opt_.bind_address + ":" + std::to_string(opt_.port) + ": " + strerror(errno);
    ::close(fd);
    return te::TE_PEER_UNREACHABLE;
  }
  sockaddr_storage bound{};
  socklen_t bl = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
  port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  listen_fd_ = fd;
  // Every descriptor the transport needs to run is taken here, so that a start that
  // succeeds cannot leave the listener without its reserve (close() releases them on failure).
  reserve_fd_ = open_descriptor_reserve();
  if (reserve_fd_ < 0) return out_of_descriptors(err);
  std::string refused;
  for (int i = 0; i < opt_.io_threads; ++i) {
    loops_.push_back(std::make_unique<Loop>(i, opt_.busy_poll_us));
    if (!loops_.back()->ready()) return out_of_descriptors(err);
    loops_.back()->start();
    std::string r = opt_.batch_scheduling ? loops_.back()->schedule_as_batch() : std::string();
    if (refused.empty()) refused = r;
  }
  // One warning for all loops, naming the first refusal (describe() shows the mix).
  if (!refused.empty()) warn("I/O threads keep the default scheduling policy: " + refused);
  int reserve = reserve_fd_;
  loops_[0]->post([this, fd, reserve] { listener_ = start_listener(this, loops_[0].get(), fd, reserve); });
  return te::TE_OK;
}

Status Transport::out_of_descriptors(std::string* err) {
  *err = std::string("cannot start: out of file descriptors (") + strerror(errno) + "); raise the limit (ulimit -n)";
  return te::TE_INTERNAL;
}

void Transport::accept_fd(int fd, const std::string& address) {
  if (closing_) {
    ::close(fd);
    return;
  }
  {
    // Capped before anything is allocated for it: past the caps the connection is closed.
    std::lock_guard<std::mutex> lock(conn_mu_);
    uint64_t& mine = connections_by_address_[address];
    if (connections_ >= opt_.max_connections || mine >= opt_.max_connections_per_address) {
      if (mine == 0) connections_by_address_.erase(address);
      ::close(fd);
      return;
    }
    ++mine;
    ++connections_;
  }
  tune_socket(fd, opt_);
  Loop* l = loops_[next_accept_++ % loops_.size()].get();
  l->post([this, l, fd, address] {
    if (l->stopping()) {
      ::close(fd);
      connection_closed(address);
      return;
    }
    new ServerConn(this, l, fd, address);
  });
}

void Transport::connection_closed(const std::string& address) {
  std::lock_guard<std::mutex> lock(conn_mu_);
  auto it = connections_by_address_.find(address);
  if (it == connections_by_address_.end()) return;
  if (--it->second == 0) connections_by_address_.erase(it);
  --connections_;
}

namespace {
// What one queued notification costs besides its payload and its sender's name (event,
// bookkeeping), so a flood of empty ones is bounded by the byte budget too.
constexpr uint64_t kNotifyOverhead = 256;
// The sender's name is copied into every queued notification (Event::text), so it is
// charged with each one: a peer with a long name cannot queue more than the budget allows.
uint64_t notify_cost(const std::string& from, size_t payload) { return payload + from.size() + kNotifyOverhead; }
}  // namespace

Status Transport::deliver_notification(const std::string& from, std::vector<uint8_t> payload) {
  if (!notify_budget_.admit(from, notify_cost(from, payload.size()))) return te::TE_POOL_EXHAUSTED;
  Event e;
  e.kind = Event::NOTIFY;
  e.text = from;
  e.payload = std::move(payload);
  emit(std::move(e));
  return te::TE_OK;
}

void Transport::notification_taken(const std::string& from, size_t bytes) {
  notify_budget_.release(from, notify_cost(from, bytes));
}

uint64_t Transport::open_peer(const std::string& host, uint16_t port, uint64_t epoch, const std::string& name,
                              bool local, uint64_t open_id) {
  auto p = std::make_shared<Peer>();
  p->owner = this;
  p->host = host;
  p->port = port;
  p->epoch = epoch;
  p->name = name;
  p->local = local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p->id = next_peer_++;
    peers_[p->id] = p;
  }
  if (local) {
    Event e;
    e.kind = Event::OPEN;
    e.id = open_id ? open_id : p->id;
    emit(std::move(e));
    return p->id;
  }
  uint32_t base = p->id % loops_.size();
  for (int i = 0; i < opt_.lanes; ++i) p->lanes.push_back(new Lane(p.get(), loop_for(base + i), i));
  {
    std::lock_guard<std::mutex> lock(p->open_mu);
    p->open_id = open_id ? open_id : p->id;
    p->open_pending = opt_.lanes;
  }
  for (Lane* l : p->lanes) l->open();
  return p->id;
}

void Transport::close_peer(uint64_t peer_id) {
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(peer_id);
    if (it == peers_.end()) return;
    p = it->second;
    peers_.erase(it);
  }
  p->closed = true;
  for (Lane* l : p->lanes) l->shut(te::TE_ABORTED, "peer closed");
}

Status Transport::submit(uint64_t peer_id, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                         const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len,
                         uint64_t* batch_id, std::string* err, const BatchExtras& rows) {
  std::shared_ptr<Batch> b;
  Status st = new_batch(peer_id, lengths, n, notify, notify_len, &b, err);
  if (st != te::TE_OK) return st;
  b->verify = rows.verify_writes;
  const std::shared_ptr<Peer>& p = b->peer;
  const uint32_t lanes = p->local ? 1 : static_cast<uint32_t>(p->lanes.size());
  plan_batch(b.get(), ops, local, remote, check_requests(b.get(), ops, local, remote, rows), lanes);
  b->remaining.store(static_cast<int64_t>(b->slices.size()) + 1);  // +1: released after queueing
  {
    std::lock_guard<std::mutex> lock(mu_);
    batches_[b->id] = b;
  }
  *batch_id = b->id;
  if (p->local) {
    if (!b->slices.empty()) {
      // A same-process batch may copy gigabytes or wait on a device: on a worker, not a loop.
      workers_.run([this, b] { run_local(b); });
    }
  } else {
    queue_on_lanes(b.get(), lanes);
  }
  Slice guard;
  guard.batch = b.get();
  guard.req = kNotifyRequest;
  b->complete(&guard, te::TE_OK);
  return te::TE_OK;
}

Status Transport::new_batch(uint64_t peer_id, const uint64_t* lengths, size_t n, const uint8_t* notify,
                            size_t notify_len, std::shared_ptr<Batch>* out, std::string* err) {
  if (closing_) {
    *err = "transport closed";
    return te::TE_ABORTED;
  }
  std::shared_ptr<Peer> p;
  auto b = std::make_shared<Batch>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(peer_id);
    if (it == peers_.end()) {
      *err = "peer is not open (closed, or never opened with openPeer)";
      return te::TE_PEER_NOT_FOUND;
    }
    p = it->second;
    b->id = next_batch_++;
  }
  if (notify_len > kMaxControlBody) {
    *err = "notification payload larger than 64 KiB";
    return te::TE_INVALID_ARGUMENT;
  }
  b->owner = this;
  b->peer = p;
  b->n = n;
  b->lengths.assign(lengths, lengths + n);
  b->statuses.reset(new std::atomic<int32_t>[n ? n : 1]);
  if (notify) {
    b->has_notify = true;
    b->notify.assign(notify, notify + notify_len);
    b->notify_slice.batch = b.get();
    b->notify_slice.req = kNotifyRequest;
    b->notify_slice.op = OP_NOTIFY;
    b->notify_slice.len = notify_len;
  }
  *out = std::move(b);
  return te::TE_OK;
}

void Transport::cancel(uint64_t batch_id, int32_t status) {
  std::shared_ptr<Batch> b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = batches_.find(batch_id);
    if (it == batches_.end()) return;
    b = it->second;
  }
  int32_t expected = 0;
  b->cancel_at.store(now_ms());
  if (!b->cancel_status.compare_exchange_strong(expected, status)) return;
  if (!b->peer->local)
    for (Lane* l : b->peer->lanes) l->sweep();
}

void Transport::warn(const std::string& message) {
  Event e;
  e.kind = Event::LOG;
  e.text = message;
  emit(std::move(e));
}

void Transport::finish_batch(Batch* b) {
  Event e;
  e.kind = Event::BATCH;
  e.id = b->id;
  emit(std::move(e));
}

std::shared_ptr<Batch> Transport::take_batch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return nullptr;
  auto b = it->second;
  batches_.erase(it);
  return b;
}

void Transport::close() {
  if (closing_.exchange(true)) return;
  // Copies in progress finish first and post their results to the loops, which still run,
  // so no slice settles while a worker still touches its memory.
  workers_.stop();
  for (auto& l : loops_) l->stop();                        // lanes fail their slices with ABORTED, connections close
  if (!listener_ && listen_fd_ >= 0) ::close(listen_fd_);  // a listener closes both itself
  if (!listener_ && reserve_fd_ >= 0) ::close(reserve_fd_);
  listen_fd_ = -1;
  reserve_fd_ = -1;
  std::lock_guard<std::mutex> lock(mu_);
  peers_.clear();
}

}  // namespace tetcp
