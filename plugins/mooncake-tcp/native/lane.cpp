#include "lane.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "recv_buffer.h"
#include "te/epoch.h"
#include "te/hmac_sha256.h"

namespace tetcp {

namespace {
constexpr size_t kRbuf = 256 * 1024;
constexpr uint64_t kDirectMin = 16 * 1024;
constexpr size_t kMaxIov = 512;
constexpr size_t kMaxInflightSlices = 8192;

std::string errstr(int e) { return std::string(strerror(e)); }

bool resolve(const std::string& host, uint16_t port, sockaddr_storage* out, socklen_t* len) {
  std::memset(out, 0, sizeof *out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(sockaddr_in6);
    return true;
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  if (res->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(out)->sin_port = htons(port);
  else reinterpret_cast<sockaddr_in6*>(out)->sin6_port = htons(port);
  freeaddrinfo(res);
  return true;
}

uint64_t frame_bytes(const Slice* s) {
  return kHeaderSize + (s->op == OP_READ ? 0 : s->len);
}
}  // namespace

Lane::Lane(Peer* peer, Loop* loop, uint32_t index) : peer_(peer), loop_(loop), index_(index) {}

Lane::~Lane() {
  if (fd_ >= 0) ::close(fd_);
}

void Lane::post_pump() {
  {
    std::lock_guard<std::mutex> lock(qmu_);
    if (pump_posted_) return;
    pump_posted_ = true;
  }
  // The task keeps the peer (and so this lane) alive until it ran.
  loop_->post([this, keep = peer_->shared_from_this()] { pump(); });
}

void Lane::enqueue(Slice* s) {
  {
    std::lock_guard<std::mutex> lock(qmu_);
    incoming_.push_back(s);
  }
  post_pump();
}

void Lane::open() {
  {
    std::lock_guard<std::mutex> lock(qmu_);
    open_requested_ = true;
  }
  post_pump();
}

void Lane::sweep() { post_pump(); }

void Lane::shut(int32_t status, const std::string& why) {
  loop_->post([this, status, why, keep = peer_->shared_from_this()] {
    fail(status, why);
    closed = true;
    loop_->retire(this, false);
  });
}

void Lane::pump() {
  bool open_req;
  {
    std::lock_guard<std::mutex> lock(qmu_);
    pump_posted_ = false;
    for (Slice* s : incoming_) pending_.push_back(s);
    incoming_.clear();
    open_req = open_requested_;
    open_requested_ = false;
  }
  if (closed || loop_->stopping()) {
    fail(te::TE_ABORTED, "transport closed");
    return;
  }
  if (open_req) {
    if (state_ == READY) {
      peer_->lane_opened(te::TE_OK, "");
    } else {
      reporting_open_ = true;
    }
  }
  // Cancelled slices that were never sent fail right away.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if ((*it)->batch->cancelled()) {
      Slice* s = *it;
      it = pending_.erase(it);
      s->batch->complete(s, s->batch->cancel_status.load());
    } else {
      ++it;
    }
  }
  if (state_ == IDLE && (!pending_.empty() || reporting_open_)) start_connect();
  if (state_ == READY) {
    refill();
    flush();
  }
}

void Lane::start_connect() {
  std::string sticky_msg;
  if (int32_t sticky = peer_->sticky_failure(&sticky_msg)) {
    fail(sticky, sticky_msg);
    return;
  }
  sockaddr_storage sa;
  socklen_t salen = 0;
  if (!resolve(peer_->host, peer_->port, &sa, &salen)) {
    fail(te::TE_PEER_UNREACHABLE, "cannot resolve host " + peer_->host);
    return;
  }
  fd_ = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    fail(te::TE_INTERNAL, "socket(): " + errstr(errno));
    return;
  }
  tune_socket(fd_, peer_->owner->options().socket_buffer);
  deadline_ = now_ms() + peer_->owner->options().connect_timeout_ms;
  int r = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), salen);
  if (r < 0 && errno != EINPROGRESS) {
    fail(te::TE_PEER_UNREACHABLE, "connect to " + peer_->label() + ": " + errstr(errno));
    return;
  }
  state_ = CONNECTING;
  interest_ = EPOLLOUT | EPOLLIN;
  loop_->add(fd_, interest_, this);
}

void Lane::send_ctrl(const Header& h, const uint8_t* body, size_t len) {
  size_t at = ctrl_out_.size();
  ctrl_out_.resize(at + kHeaderSize + len);
  encode(h, ctrl_out_.data() + at);
  if (len) std::memcpy(ctrl_out_.data() + at + kHeaderSize, body, len);
}

void Lane::on_connected() {
  int err = 0;
  socklen_t l = sizeof err;
  getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &l);
  if (err != 0) {
    fail(te::TE_PEER_UNREACHABLE, "connect to " + peer_->label() + ": " + errstr(err));
    return;
  }
  te::random_bytes(client_nonce_, kNonceSize);
  const std::string& name = peer_->owner->options().segment_name;
  std::vector<uint8_t> body(8 + kNonceSize + 2 + name.size());
  put64(body.data(), peer_->owner->options().epoch);
  std::memcpy(body.data() + 8, client_nonce_, kNonceSize);
  put16(body.data() + 8 + kNonceSize, static_cast<uint16_t>(name.size()));
  std::memcpy(body.data() + 8 + kNonceSize + 2, name.data(), name.size());
  Header h;
  h.op = OP_HELLO;
  h.addr = peer_->epoch;
  h.length = body.size();
  send_ctrl(h, body.data(), body.size());
  state_ = HELLO;
  flush();
}

void Lane::reached_ready() {
  state_ = READY;
  last_used_ = now_ms();
  if (reporting_open_) {
    reporting_open_ = false;
    peer_->lane_opened(te::TE_OK, "");
  }
  refill();
  flush();
}

void Lane::close_connection() {
  if (fd_ >= 0) {
    // Abortive close (RST): a FIN would queue behind the bytes not yet sent, so the target
    // would still see an open connection while it reads them; an RST discards them and
    // tells the target at once that nothing more it reads from here may be applied.
    linger off{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    loop_->remove(fd_, this);
    ::close(fd_);
    fd_ = -1;
  }
  state_ = IDLE;
  want_out_ = false;
  interest_ = 0;
  ctrl_out_.clear();
  ctrl_off_ = 0;
  rbuf_.clear();
  rbuf_.release();  // a lane without a connection holds no receive buffer
  in_body_ = false;
  body_staged_ = false;
  body_why_.clear();
  tx_staged_id_ = 0;
  tx_index_ = 0;
  tx_off_ = 0;
  inflight_bytes_ = 0;
}

void Lane::fail(int32_t status, const std::string& why, bool sticky) {
  if (sticky) peer_->set_sticky(status, why);
  close_connection();
  if (reporting_open_) {
    reporting_open_ = false;
    peer_->lane_opened(status, why);
  }
  std::deque<Slice*> victims;
  victims.swap(inflight_);
  for (Slice* s : pending_) victims.push_back(s);
  pending_.clear();
  {
    std::lock_guard<std::mutex> lock(qmu_);
    for (Slice* s : incoming_) victims.push_back(s);
    incoming_.clear();
  }
  for (Slice* s : victims) s->batch->complete(s, status, why.c_str());
}

// A cancelled batch's slices were not answered within the grace time. The connection is
// closed first, so the target discards what it has not applied yet (it applies nothing
// from a connection its initiator closed); only then do the cancelled slices settle.
// Slices of other batches on this connection did nothing wrong: they are sent again, in
// order, on a fresh connection (WRITE and READ are idempotent).
void Lane::drop_for_cancel(int64_t grace) {
  read_input();  // answers that already arrived complete their slices first
  if (fd_ < 0) return;  // the connection failed meanwhile (and with it its slices)
  std::vector<Slice*> cancelled;
  std::deque<Slice*> resend;
  for (Slice* s : inflight_) (s->batch->cancelled() ? cancelled.push_back(s) : resend.push_back(s));
  inflight_.clear();
  close_connection();
  while (!resend.empty()) {
    pending_.push_front(resend.back());
    resend.pop_back();
  }
  const std::string why = "peer " + peer_->label() + " did not answer within " + std::to_string(grace) +
                          " ms of the cancel; its connection was closed before the batch settled";
  for (Slice* s : cancelled) s->batch->complete(s, s->batch->cancel_status.load(), why.c_str());
  if (!pending_.empty() && fd_ < 0 && !closed) start_connect();
}

void Lane::refill() {
  const uint64_t window = peer_->owner->options().window_bytes;
  while (!pending_.empty() && inflight_.size() < kMaxInflightSlices &&
         (inflight_.empty() || inflight_bytes_ + pending_.front()->len <= window)) {
    Slice* s = pending_.front();
    pending_.pop_front();
    if (s->batch->cancelled()) {
      s->batch->complete(s, s->batch->cancel_status.load());
      continue;
    }
    Header h;
    h.op = s->op;
    h.id = next_id_++;
    h.addr = s->remote;
    h.length = s->len;
    h.span_addr = s->op == OP_NOTIFY ? 0 : s->span_addr;
    h.span_length = s->op == OP_NOTIFY ? 0 : s->span_len;
    encode(h, s->hdr);
    inflight_.push_back(s);
    inflight_bytes_ += s->len;
    last_used_ = now_ms();
  }
}

void Lane::flush() {
  if (fd_ < 0) return;
  for (;;) {
    iovec iov[kMaxIov + 2];
    std::vector<te::Lease> leases;
    size_t n = 0;
    bool restage = false;
    size_t ctrl_left = ctrl_out_.size() - ctrl_off_;
    if (ctrl_left) {
      iov[n++] = {ctrl_out_.data() + ctrl_off_, ctrl_left};
    }
    if (state_ == READY) {
      uint64_t skip = tx_off_;
      for (size_t i = tx_index_; i < inflight_.size() && n + 2 <= kMaxIov; ++i) {
        Slice* s = inflight_[i];
        if (s->device != kHost && s->op == OP_WRITE && s->len) {
          // Device memory goes out through the pinned tx buffer, one slice at a time: the
          // slice must be the first unsent one, so the buffer's previous slice is gone.
          if (i != tx_index_) break;
          uint64_t id = get64(s->hdr + 16);
          if (tx_staged_id_ != id) {
            std::string why;
            te::Status st = stage_write(s, &why);
            if (st != te::TE_OK) {
              // Nothing of this frame was sent: it leaves the stream and fails alone.
              inflight_.erase(inflight_.begin() + i);
              inflight_bytes_ -= s->len;
              s->batch->complete(s, st, why.c_str());
              restage = true;
              break;
            }
            tx_staged_id_ = id;
          }
          if (skip < kHeaderSize) iov[n++] = {s->hdr + skip, kHeaderSize - skip};
          uint64_t body_skip = skip > kHeaderSize ? skip - kHeaderSize : 0;
          skip = 0;
          iov[n++] = {tx_stage_->data() + body_skip, s->len - body_skip};
          continue;
        }
        if (skip < kHeaderSize) iov[n++] = {s->hdr + skip, kHeaderSize - skip};
        uint64_t body_skip = skip > kHeaderSize ? skip - kHeaderSize : 0;
        skip = 0;
        if (s->op == OP_READ || s->len == 0) continue;
        if (s->op == OP_NOTIFY) {
          iov[n++] = {s->batch->notify.data() + body_skip, s->len - body_skip};
          continue;
        }
        bool covered = false;
        for (auto& l : leases)
          if (l.covers(s->local, s->len)) covered = true;
        if (!covered) {
          te::Lease l;
          if (peer_->owner->registry().acquire(s->local, s->len, false, l) != te::TE_OK) {
            if (n > 0) break;  // send what precedes it first
            fail(te::TE_CONNECTION_LOST, "local memory unregistered while its write was being sent");
            return;
          }
          leases.push_back(std::move(l));
        }
        iov[n++] = {reinterpret_cast<void*>(s->local + body_skip), s->len - body_skip};
      }
    }
    if (n == 0) {
      if (restage) continue;
      want_out_ = false;
      set_interest();
      return;
    }
    ssize_t w = ::writev(fd_, iov, static_cast<int>(n));
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_out_ = true;
        set_interest();
        return;
      }
      if (errno == EINTR) continue;
      fail(te::TE_CONNECTION_LOST, "send to " + peer_->label() + ": " + errstr(errno));
      return;
    }
    uint64_t left = static_cast<uint64_t>(w);
    if (ctrl_left) {
      uint64_t t = left < ctrl_left ? left : ctrl_left;
      ctrl_off_ += t;
      left -= t;
      if (ctrl_off_ == ctrl_out_.size()) {
        ctrl_out_.clear();
        ctrl_off_ = 0;
      }
    }
    while (left > 0 && tx_index_ < inflight_.size()) {
      uint64_t fb = frame_bytes(inflight_[tx_index_]) - tx_off_;
      if (left >= fb) {
        left -= fb;
        tx_off_ = 0;
        ++tx_index_;
      } else {
        tx_off_ += left;
        left = 0;
      }
    }
  }
}

te::Status Lane::stage_write(Slice* s, std::string* why) {
  if (!tx_stage_) tx_stage_ = std::make_unique<Stager>(peer_->owner->staging_bytes());
  te::Status st = te::TE_OK;
  uint8_t* buf = tx_stage_->buffer(&st, why);
  if (!buf) return st;
  if (s->len > tx_stage_->capacity()) {
    *why = "slice larger than the staging buffer";
    return te::TE_INTERNAL;
  }
  te::Lease l;
  st = peer_->owner->registry().acquire(s->local, s->len, false, l);
  if (st != te::TE_OK) {
    *why = "local memory unregistered while its write was being sent";
    return st;
  }
  return tx_stage_->to_host(s->device, buf, s->local, s->len, why);
}

void Lane::set_interest() {
  if (fd_ < 0) return;
  uint32_t want = EPOLLIN | (want_out_ || state_ == CONNECTING ? uint32_t(EPOLLOUT) : 0u);
  if (want != interest_) {
    interest_ = want;
    loop_->modify(fd_, want, this);
  }
}

void Lane::on_event(uint32_t events) {
  if (state_ == CONNECTING) {
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_connected();
    return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_input();
  if (fd_ >= 0 && (events & EPOLLOUT)) {
    if (state_ == READY) refill();
    flush();
  }
}

void Lane::read_input() {
  for (int rounds = 0; rounds < 64 && fd_ >= 0; ++rounds) {
    ssize_t r;
    if (in_body_ && !body_drain_ && !body_ctrl_ && rbuf_.empty() && body_left_ >= kDirectMin) {
      // Large READ body: receive straight into registered local memory.
      uint64_t chunk = body_left_ < (4u << 20) ? body_left_ : (4u << 20);
      te::Lease l;
      if (body_staged_) {
        // Device destination: the body lands in the rx staging buffer (body_dst_ points there).
      } else if (peer_->owner->registry().acquire(body_dst_, chunk, false, l) != te::TE_OK) {
        body_drain_ = true;
        body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        continue;
      }
      r = ::recv(fd_, reinterpret_cast<void*>(body_dst_), chunk, 0);
      if (r > 0) {
        body_dst_ += r;
        body_left_ -= r;
        if (body_left_ == 0) finish_body();
        continue;
      }
    } else {
      r = rbuf_.fill(fd_, kRbuf);
      if (r > 0) {
        if (!parse()) return;
        continue;
      }
    }
    if (r == 0) {
      fail(te::TE_CONNECTION_LOST, "peer " + peer_->label() + " closed the connection");
      return;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == EINTR) continue;
    fail(te::TE_CONNECTION_LOST, "receive from " + peer_->label() + ": " + errstr(errno));
    return;
  }
}

// Consumes buffered bytes; false when the lane failed.
bool Lane::parse() {
  for (;;) {
    size_t avail = rbuf_.size();
    if (in_body_) {
      if (avail == 0) return true;
      uint64_t take = avail < body_left_ ? avail : body_left_;
      if (body_ctrl_) {
        ctrl_body_.insert(ctrl_body_.end(), rbuf_.data(), rbuf_.data() + take);
      } else if (body_staged_) {
        std::memcpy(reinterpret_cast<void*>(body_dst_), rbuf_.data(), take);
      } else if (!body_drain_) {
        te::Lease l;
        if (peer_->owner->registry().acquire(body_dst_, take, false, l) == te::TE_OK) {
          std::memcpy(reinterpret_cast<void*>(body_dst_), rbuf_.data(), take);
        } else {
          body_drain_ = true;
          body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        }
      }
      body_dst_ += take;
      body_left_ -= take;
      rbuf_.consume(take);
      if (body_left_ == 0) {
        finish_body();
        if (fd_ < 0) return false;
      }
      continue;
    }
    if (avail < kHeaderSize) return true;
    Header h = decode(rbuf_.data());
    rbuf_.consume(kHeaderSize);
    if (!on_header(h)) return false;
  }
}

bool Lane::on_header(const Header& h) {
  if (h.magic != kMagic) {
    fail(te::TE_BAD_FRAME, "peer " + peer_->label() + " sent a frame with a bad magic");
    return false;
  }
  if (h.version != kVersion) {
    fail(te::TE_PROTOCOL_MISMATCH, "peer " + peer_->label() + " speaks protocol version " + std::to_string(h.version) +
                                       ", this build speaks " + std::to_string(kVersion), true);
    return false;
  }
  cur_ = h;
  body_status_ = te::TE_OK;
  body_drain_ = false;
  body_ctrl_ = false;
  if (state_ == HELLO || state_ == AUTH) {
    uint8_t want = (state_ == HELLO ? OP_HELLO : OP_AUTH) | OP_RESPONSE;
    if (h.op != want || h.length > kMaxControlBody) {
      fail(te::TE_BAD_FRAME, "unexpected handshake frame from " + peer_->label());
      return false;
    }
    ctrl_body_.clear();
    body_ctrl_ = true;
    in_body_ = true;
    body_left_ = h.length;
    if (h.length == 0) finish_body();
    return fd_ >= 0;
  }
  if (state_ != READY || inflight_.empty() || tx_index_ == 0) {
    fail(te::TE_BAD_FRAME, "unsolicited response from " + peer_->label());
    return false;
  }
  Slice* s = inflight_.front();
  if (h.id != get64(s->hdr + 16) || h.op != (s->op | OP_RESPONSE)) {
    fail(te::TE_BAD_FRAME, "out-of-order response from " + peer_->label());
    return false;
  }
  if (s->op == OP_READ && h.status == te::TE_OK) {
    if (h.length != s->len) {
      fail(te::TE_BAD_FRAME, "READ response of the wrong length from " + peer_->label());
      return false;
    }
    in_body_ = true;
    body_left_ = h.length;
    body_dst_ = s->local;
    if (s->batch->cancelled()) {
      body_drain_ = true;  // nothing lands for a cancelled batch
      body_status_ = s->batch->cancel_status.load();
    } else if (s->device != kHost && h.length) {
      // Device destination: receive into pinned staging, copy to the device when complete.
      if (!rx_stage_) rx_stage_ = std::make_unique<Stager>(peer_->owner->staging_bytes());
      te::Status st = te::TE_OK;
      uint8_t* buf = rx_stage_->buffer(&st, &body_why_);
      if (buf && h.length <= rx_stage_->capacity()) {
        body_staged_ = true;
        body_dst_ = reinterpret_cast<uint64_t>(buf);
      } else {
        body_drain_ = true;
        body_status_ = buf ? te::TE_INTERNAL : st;
        if (buf) body_why_ = "READ response larger than the staging buffer";
      }
    }
    if (h.length == 0) finish_body();
    return fd_ >= 0;
  }
  if (h.length != 0) {
    fail(te::TE_BAD_FRAME, "response with an unexpected body from " + peer_->label());
    return false;
  }
  const char* why = nullptr;
  if (h.status == te::TE_POOL_EXHAUSTED && s->op == OP_NOTIFY)
    why = "the target's notification queue is full (its listeners are behind); the notification was not delivered";
  else if (h.status != te::TE_OK)
    why = "the target refused the request";
  complete_front(h.status, why);
  return fd_ >= 0;
}

void Lane::finish_body() {
  in_body_ = false;
  if (!body_ctrl_) {
    if (body_staged_ || !body_why_.empty()) {
      finish_staged_body();
      return;
    }
    complete_front(body_status_, body_status_ ? "local memory unregistered while the READ landed" : nullptr);
    return;
  }
  body_ctrl_ = false;
  const Options& o = peer_->owner->options();
  if (state_ == HELLO) {
    if (cur_.status != te::TE_OK) {
      fail(cur_.status, "peer " + peer_->label() + " refused the connection: " + te::status_name(cur_.status) +
                            (cur_.status == te::TE_STALE_DESCRIPTOR ? " (it restarted: its epoch changed)" : ""),
           cur_.status == te::TE_STALE_DESCRIPTOR || cur_.status == te::TE_PROTOCOL_MISMATCH ||
               cur_.status == te::TE_AUTH_FAILED);
      return;
    }
    if (ctrl_body_.size() < kNonceSize + 1) {
      fail(te::TE_BAD_FRAME, "short HELLO answer from " + peer_->label());
      return;
    }
    server_epoch_ = cur_.addr;
    if (server_epoch_ != peer_->epoch) {
      fail(te::TE_STALE_DESCRIPTOR, "peer " + peer_->label() + " has epoch " + std::to_string(server_epoch_) +
                                        ", the descriptor says " + std::to_string(peer_->epoch), true);
      return;
    }
    std::memcpy(server_nonce_, ctrl_body_.data(), kNonceSize);
    bool auth_required = ctrl_body_[kNonceSize] != 0;
    if (auth_required != !o.secret.empty()) {
      fail(te::TE_AUTH_FAILED,
           auth_required ? "peer " + peer_->label() + " requires a shared secret (set TE_TCP_AUTH_SECRET / authSecret)"
                         : "peer " + peer_->label() + " does not authenticate, but this side has a shared secret",
           true);
      return;
    }
    if (!auth_required) {
      reached_ready();
      return;
    }
    uint8_t epoch_le[8];
    put64(epoch_le, server_epoch_);
    te::Bytes parts[5] = {{kClientLabel, std::strlen(kClientLabel)},
                          {client_nonce_, kNonceSize},
                          {server_nonce_, kNonceSize},
                          {epoch_le, 8},
                          {o.segment_name.data(), o.segment_name.size()}};
    uint8_t mac[kMacSize];
    te::hmac_sha256(o.secret.data(), o.secret.size(), parts, 5, mac);
    Header h;
    h.op = OP_AUTH;
    h.length = kMacSize;
    send_ctrl(h, mac, kMacSize);
    state_ = AUTH;
    flush();
    return;
  }
  if (state_ == AUTH) {
    if (cur_.status != te::TE_OK || ctrl_body_.size() != kMacSize) {
      fail(te::TE_AUTH_FAILED, "peer " + peer_->label() + " rejected the shared secret", true);
      return;
    }
    te::Bytes parts[3] = {{kServerLabel, std::strlen(kServerLabel)}, {server_nonce_, kNonceSize}, {client_nonce_, kNonceSize}};
    uint8_t mac[kMacSize];
    te::hmac_sha256(o.secret.data(), o.secret.size(), parts, 3, mac);
    if (!te::equal_ct(mac, ctrl_body_.data(), kMacSize)) {
      fail(te::TE_AUTH_FAILED, "peer " + peer_->label() + " could not prove it knows the shared secret", true);
      return;
    }
    reached_ready();
  }
}

// A READ body received into rx staging (or refused before it could be staged): copy it to
// the device under a lease on the destination, then complete the slice.
void Lane::finish_staged_body() {
  Slice* s = inflight_.front();
  std::string why;
  why.swap(body_why_);
  if (body_staged_) {
    body_staged_ = false;
    if (body_status_ == te::TE_OK) {
      te::Lease l;
      body_status_ = peer_->owner->registry().acquire(s->local, s->len, false, l);
      if (body_status_ != te::TE_OK)
        why = "local memory unregistered while the READ landed";
      else
        body_status_ = rx_stage_->to_device(s->device, s->local, rx_stage_->data(), s->len, &why);
    }
  }
  if (body_status_ != te::TE_OK && why.empty()) why = "local memory unregistered while the READ landed";
  complete_front(body_status_, body_status_ ? why.c_str() : nullptr);
}

void Lane::complete_front(int32_t status, const char* why) {
  Slice* s = inflight_.front();
  inflight_.pop_front();
  --tx_index_;
  last_used_ = now_ms();
  inflight_bytes_ -= s->len;
  int32_t cancel = s->batch->cancel_status.load();
  if (status == te::TE_OK && cancel != 0 && s->op == OP_READ) status = cancel;
  s->batch->complete(s, status, why);
  if (!pending_.empty()) {
    refill();
    flush();
  }
}

void Lane::on_tick(int64_t now) {
  // Idle lanes close at half the idle timeout, before a target (same setting) closes them
  // and races a request just being sent; the next slice connects again.
  if (state_ == READY && inflight_.empty() && pending_.empty() && ctrl_out_.empty() &&
      now - last_used_ > peer_->owner->options().idle_timeout_ms / 2) {
    close_connection();
    return;
  }
  if ((state_ == CONNECTING || state_ == HELLO || state_ == AUTH) && now > deadline_) {
    fail(te::TE_PEER_UNREACHABLE, "connecting to " + peer_->label() + " timed out after " +
                                      std::to_string(peer_->owner->options().connect_timeout_ms) + " ms");
    return;
  }
  if (state_ == READY && !inflight_.empty()) {
    const int64_t grace = peer_->owner->options().cancel_grace_ms;
    for (Slice* s : inflight_) {
      Batch* b = s->batch;
      if (b->cancelled() && now - b->cancel_at.load() > grace) {
        drop_for_cancel(grace);
        return;
      }
    }
  }
}

void Lane::on_shutdown() {
  fail(te::TE_ABORTED, "transport closed");
  closed = true;
  loop_->retire(this, false);
}

}  // namespace tetcp
