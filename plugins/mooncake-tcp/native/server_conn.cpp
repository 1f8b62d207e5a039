#include "server_conn.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
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
// Receive buffer: small until the handshake is done (a connection that never completes it
// costs little), then large enough for many small frames per recv; freed when idle.
constexpr size_t kHandshakeReadBuffer = 4 * 1024;
constexpr size_t kServerReadBuffer = 64 * 1024;
constexpr int64_t kReleaseIdleMs = 1000;
constexpr size_t kMaxResponseIov = 512;
constexpr size_t kPauseOut = 4096;   // stop reading requests while this many responses are queued
constexpr size_t kResumeOut = 1024;
}  // namespace

ServerConn::ServerConn(Transport* t, Loop* loop, int fd, std::string address)
    : t_(t), loop_(loop), fd_(fd), address_(std::move(address)) {
  last_active_ = now_ms();
  deadline_ = last_active_ + t_->options().handshake_timeout_ms;
  interest_ = EPOLLIN;
  loop_->add(fd_, interest_, this);
}

ServerConn::~ServerConn() {
  if (fd_ >= 0) ::close(fd_);
}

void ServerConn::drop(const std::string& why) {
  if (closed) return;
  (void)why;  // the initiator reports the failure; the target keeps serving others
  closed = true;
  // Listed until a running device copy is done (the job unlists it): a REVOKE waits for it.
  if (served_ && !rx_copies_->running) t_->served().remove(client_nonce_, rx_copies_.get());
  loop_->remove(fd_, this);
  ::close(fd_);
  fd_ = -1;
  t_->connection_closed(address_);
  loop_->retire(this, true);
}

void ServerConn::on_shutdown() { drop("transport closed"); }

void ServerConn::on_tick(int64_t now) {
  if (state_ != READY && now > deadline_) {
    drop("handshake timed out");
    return;
  }
  if (active_) {
    active_ = false;
    last_active_ = now;
    return;
  }
  // Idle: no byte moved either way (an initiator closes its idle lanes at half this time).
  if (now - last_active_ > t_->options().idle_timeout_ms) {
    drop("idle");
    return;
  }
  if (now - last_active_ > kReleaseIdleMs) rbuf_.release();
}

void ServerConn::set_interest() {
  if (closed) return;
  uint32_t want = (input_held() || close_after_flush_ ? 0u : uint32_t(EPOLLIN)) | (want_out_ ? uint32_t(EPOLLOUT) : 0u);
  if (want != interest_) {
    interest_ = want;
    loop_->modify(fd_, want, this);
  }
}

void ServerConn::on_event(uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) {
    // Let recv report it (may still hold data); EPOLLHUP alone with no data is a close.
    events |= EPOLLIN;
  }
  if ((rx_busy_ || awaiting_revoke_) && (events & (EPOLLERR | EPOLLHUP))) {
    // Input is paused for a device copy or a revocation but the socket failed (reported
    // whatever the interest): drop now rather than spin until the copy or answer is done.
    drop(rx_busy_ ? "connection failed during a device copy" : "connection failed while a revocation was confirmed");
    return;
  }
  if ((events & EPOLLIN) && !input_held() && !close_after_flush_) read_input();
  if (!closed) flush();
}

void ServerConn::read_input() {
  for (int rounds = 0; rounds < 64 && !closed && !input_held() && !close_after_flush_; ++rounds) {
    // A large body with nothing buffered goes to its destination without the buffer.
    const bool in_place = in_body_ && (mode_ == DIRECT || mode_ == STAGED) && rbuf_.empty() && body_left_ >= kDirectMin;
    ssize_t r;
    uint64_t asked = 0;
    if (in_place && mode_ == DIRECT) {
      if (!initiator_connected()) return;
      bool unregistered = false;
      // The body's last part brings the next frame's header with it, when it has arrived.
      r = body_left_ <= kDirectChunk
              ? recv_body_end(fd_, t_->registry(), true, body_dst_, body_left_, rbuf_, kServerReadBuffer, kHeaderSize, &unregistered, &asked)
              : recv_into_registered(fd_, t_->registry(), true, body_dst_, body_left_, &unregistered, &asked);
      if (unregistered) {
        // Unregistered while the body arrived: the rest is drained, the ack says so.
        mode_ = DRAIN;
        body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        continue;
      }
    } else if (in_place) {
      // Device destination: into rx staging, copied to the device when it is full.
      uint64_t room = rx_stage_->capacity() - stage_fill_;
      r = recv_in_place(fd_, reinterpret_cast<uint64_t>(rx_stage_->data() + stage_fill_), body_left_ < room ? body_left_ : room, &asked);
    } else {
      const size_t cap = state_ == READY ? kServerReadBuffer : kHandshakeReadBuffer;
      r = rbuf_.fill(fd_, cap, header_only() ? kHeaderSize - rbuf_.size() : cap, &asked);
    }
    const bool socket_empty = drained(r, asked);
    liveness_ = UNKNOWN;
    switch (classify_recv(r)) {
      case RecvResult::DATA:
        break;
      case RecvResult::AGAIN:
        return;
      case RecvResult::INTERRUPTED:
        continue;
      case RecvResult::CLOSED:
        drop("peer closed");
        return;
      case RecvResult::FAILED:
        drop(std::string("recv: ") + strerror(errno));
        return;
    }
    active_ = true;
    if (!in_place) {
      if (!parse()) return;
      if (socket_empty) return;
      continue;
    }
    const uint64_t got = static_cast<uint64_t>(r) < body_left_ ? static_cast<uint64_t>(r) : body_left_;  // the rest went to rbuf_
    body_left_ -= got;
    if (mode_ == STAGED) {
      stage_fill_ += got;
      if (stage_fill_ == rx_stage_->capacity() || body_left_ == 0) {
        const bool handed_over = stage_flush();
        if (closed || handed_over) return;  // resumed (and the body finished) by on_stage_flushed
      }
    } else {
      body_dst_ += got;
    }
    if (body_left_ == 0) {
      finish_body();
      if (!rbuf_.empty() && !parse()) return;  // the next frame's header came with this body
    }
    if (closed || socket_empty) return;
  }
}

// While large WRITEs arrive, a frame's header is received alone, so its body goes to its
// destination directly instead of mostly through the buffer and a second copy (a 64 KiB
// body fit in one buffer fill almost whole). Small frames keep being read many per recv:
// the first one after large writes turns this off again.
bool ServerConn::header_only() const {
  return large_writes_ && state_ == READY && !in_body_ && rbuf_.size() < kHeaderSize;
}

bool ServerConn::parse() {
  for (;;) {
    if (closed || close_after_flush_) return false;
    if (input_held()) return true;
    size_t avail = rbuf_.size();
    if (in_body_) {
      if (avail == 0) return true;
      uint64_t take = avail < body_left_ ? avail : body_left_;
      if (mode_ == STAGED && take > rx_stage_->capacity() - stage_fill_) take = rx_stage_->capacity() - stage_fill_;
      if (mode_ == CTRL) {
        ctrl_body_.insert(ctrl_body_.end(), rbuf_.data(), rbuf_.data() + take);
      } else if (mode_ == DIRECT) {
        if (!initiator_connected()) return false;
        if (!copy_into_registered(t_->registry(), true, body_dst_, rbuf_.data(), take)) {
          mode_ = DRAIN;
          body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        }
      }  // DRAIN: the bytes stay in the scratch buffer and are dropped
      bool flush_now = false;
      if (mode_ == STAGED) {
        std::memcpy(rx_stage_->data() + stage_fill_, rbuf_.data(), take);
        stage_fill_ += take;
        flush_now = stage_fill_ == rx_stage_->capacity() || take == body_left_;
      }
      body_dst_ += take;
      body_left_ -= take;
      rbuf_.consume(take);
      if (flush_now) {
        const bool handed_over = stage_flush();
        if (closed) return false;
        if (handed_over) return true;  // resumed (and the body finished) by on_stage_flushed
      }
      if (body_left_ == 0) finish_body();
      continue;
    }
    if (avail < kHeaderSize) return true;
    Header h = decode(rbuf_.data());
    rbuf_.consume(kHeaderSize);
    if (!on_header(h)) return false;
  }
}

// The whole request (span) must lie in one remote-accessible region, and the slice in it.
int32_t ServerConn::validate(const Header& h) const {
  uint64_t span_addr = h.span_length ? h.span_addr : h.addr;
  uint64_t span_len = h.span_length ? h.span_length : h.length;
  if (h.span_length && (te::range_overflows(h.addr, h.length) || !te::range_within(span_addr, span_len, h.addr, h.length)))
    return te::TE_INVALID_ARGUMENT;
  return t_->registry().check(span_addr, span_len, true);
}

bool ServerConn::on_header(const Header& h) {
  if (h.magic != kMagic) {
    drop("bad magic");
    return false;
  }
  cur_ = h;
  body_status_ = te::TE_OK;
  if (h.version != kVersion) {
    if (state_ == HELLO && h.op == OP_HELLO) {
      respond(h, te::TE_PROTOCOL_MISMATCH);
      close_after_flush_ = true;
      return false;
    }
    drop("protocol version mismatch");
    return false;
  }
  auto start_body = [&](BodyMode m, uint64_t dst) {
    mode_ = m;
    in_body_ = true;
    body_left_ = h.length;
    body_dst_ = dst;
    ctrl_body_.clear();
    if (h.length == 0) finish_body();
  };
  switch (state_) {
    case HELLO:
      if (h.op != OP_HELLO || h.length > kMaxControlBody || h.length < 8 + kNonceSize + 2) {
        drop("expected HELLO");
        return false;
      }
      start_body(CTRL, 0);
      return !closed;
    case AUTH:
      if (h.op != OP_AUTH || h.length != kMacSize) {
        drop("expected AUTH");
        return false;
      }
      start_body(CTRL, 0);
      return !closed;
    case READY:
      break;
  }
  large_writes_ = h.op == OP_WRITE && h.length >= kDirectMin;
  switch (h.op) {
    case OP_WRITE: {
      if (h.length > kMaxBody) {
        drop("WRITE body too large");
        return false;
      }
      int32_t s = validate(h);
      body_status_ = s;
      int device = s == te::TE_OK ? t_->devices().device_of(h.addr) : kHost;
      if (device != kHost && h.length) {
        // Device region: receive into pinned staging, copy to the device, then acknowledge.
        if (!rx_stage_) rx_stage_ = std::make_shared<Stager>(t_->staging_bytes(), t_->staging_backend());
        std::string why;
        te::Status st = te::TE_OK;
        if (rx_stage_->buffer(&st, &why)) {
          stage_device_ = device;
          stage_dst_ = h.addr;
          stage_fill_ = 0;
          start_body(STAGED, h.addr);
          return !closed;
        }
        body_status_ = st;
        s = st;
      }
      start_body(s == te::TE_OK ? DIRECT : DRAIN, h.addr);
      return !closed;
    }
    case OP_READ: {
      if (h.length > kMaxBody) {
        drop("READ length too large");
        return false;
      }
      int32_t s = validate(h);
      if (s == te::TE_OK) {
        respond(h, te::TE_OK, h.addr, h.length);
        if (h.length) out_.back().device = t_->devices().device_of(h.addr);
      } else {
        respond(h, s);
      }
      return true;
    }
    case OP_NOTIFY:
      if (h.length > kMaxControlBody) {
        drop("NOTIFY too large");
        return false;
      }
      start_body(CTRL, 0);
      return !closed;
    case OP_REVOKE:
      if (h.length != kNonceSize) {
        drop("bad REVOKE");
        return false;
      }
      start_body(CTRL, 0);
      return !closed;
    default:
      drop("unknown op");
      return false;
  }
}

void ServerConn::finish_body() {
  in_body_ = false;
  const Options& o = t_->options();
  switch (state_) {
    case HELLO: {
      HelloBody hello;
      if (!parse_hello(ctrl_body_.data(), ctrl_body_.size(), &hello)) {
        drop("bad HELLO");
        return;
      }
      if (hello.name_len > kMaxPeerName) {
        // Refused before it is kept: the name travels with every notification this
        // connection would deliver (see kMaxPeerName).
        respond(cur_, te::TE_INVALID_ARGUMENT);
        close_after_flush_ = true;
        return;
      }
      std::memcpy(client_nonce_, hello.nonce, kNonceSize);
      peer_name_.assign(reinterpret_cast<const char*>(hello.name), hello.name_len);
      // Always checked: an initiator names the epoch it expects (there is no "any epoch").
      if (cur_.addr != o.epoch) {
        respond(cur_, te::TE_STALE_DESCRIPTOR);
        close_after_flush_ = true;
        return;
      }
      te::random_bytes(server_nonce_, kNonceSize);
      uint8_t extra[kNonceSize + 2];
      std::memcpy(extra, server_nonce_, kNonceSize);
      extra[kNonceSize] = o.secret.empty() ? 0 : 1;
      extra[kNonceSize + 1] = kFeatureRevoke;
      Header h = cur_;
      respond(h, te::TE_OK, 0, 0, extra, sizeof extra);
      out_.back().head[24] = 0;  // addr field: our epoch
      put64(out_.back().head + 24, o.epoch);
      if (o.secret.empty())
        enter_ready();
      else
        state_ = AUTH;
      return;
    }
    case AUTH: {
      uint8_t epoch_le[8];
      put64(epoch_le, o.epoch);
      // The proof covers the name the initiator gave in its HELLO: that name is what
      // notifications from this connection carry as their sender.
      te::Bytes parts[5] = {{kClientLabel, std::strlen(kClientLabel)},
                            {client_nonce_, kNonceSize},
                            {server_nonce_, kNonceSize},
                            {epoch_le, 8},
                            {peer_name_.data(), peer_name_.size()}};
      uint8_t mac[kMacSize];
      te::hmac_sha256(o.secret.data(), o.secret.size(), parts, 5, mac);
      if (!te::equal_ct(mac, ctrl_body_.data(), kMacSize)) {
        respond(cur_, te::TE_AUTH_FAILED);
        close_after_flush_ = true;
        return;
      }
      te::Bytes sparts[3] = {{kServerLabel, std::strlen(kServerLabel)}, {server_nonce_, kNonceSize}, {client_nonce_, kNonceSize}};
      uint8_t proof[kMacSize];
      te::hmac_sha256(o.secret.data(), o.secret.size(), sparts, 3, proof);
      respond(cur_, te::TE_OK, 0, 0, proof, kMacSize);
      enter_ready();
      return;
    }
    case READY:
      break;
  }
  if (cur_.op == OP_WRITE) {
    respond(cur_, body_status_);
  } else if (cur_.op == OP_REVOKE) {
    start_revoke(cur_);
  } else if (cur_.op == OP_NOTIFY) {
    if (!initiator_connected()) return;
    // Acknowledged only once queued; a full queue refuses it (the sender's batch fails).
    respond(cur_, t_->deliver_notification(peer_name_, std::vector<uint8_t>(ctrl_body_.begin(), ctrl_body_.end())));
  }
}

void ServerConn::enter_ready() {
  state_ = READY;
  // Listed under the nonce its initiator chose, so that initiator can revoke it later. A
  // repeated nonce (only a peer that copies another's could send one) is not listed: it
  // cannot be revoked, and the connection listed first keeps its entry.
  served_ = t_->served().add(client_nonce_, ServedConnection{this, loop_, alive_, peer_name_, rx_copies_});
}

// The named connection is closed on its own loop; the answer goes out once that happened
// (and any device copy from it finished), so a connection this one revokes applies nothing
// after the initiator read the answer. Until then this connection reads no further request:
// responses on a connection keep their order.
void ServerConn::start_revoke(const Header& h) {
  ServedConnection named;
  if (!t_->served().find(ctrl_body_.data(), &named)) {
    respond(h, te::TE_OK);  // not listed (any more): it is closed, nothing of it is applied
    return;
  }
  // (By its copies, not its address: a destroyed connection's address may be this one's.)
  if (named.copies == rx_copies_ || named.peer != peer_name_) {
    // Only the initiator that opened a connection may revoke it, and not over itself.
    respond(h, te::TE_INVALID_ARGUMENT);
    return;
  }
  awaiting_revoke_ = true;
  set_interest();
  Loop* back = loop_;
  named.loop->post([named, back, self = this, self_alive = std::weak_ptr<bool>(alive_), h] {
    auto confirm = [back, self, self_alive, h] {
      back->post([self, self_alive, h] {
        if (!self_alive.expired()) self->on_revoke_confirmed(h, te::TE_OK);
      });
    };
    if (!named.alive.expired()) {
      named.conn->revoke(std::move(confirm));
      return;
    }
    // Destroyed, but a device copy of its bytes may still run.
    if (named.copies->running)
      named.copies->waiters.push_back(std::move(confirm));
    else
      confirm();
  });
}

void ServerConn::revoke(std::function<void()> confirmed) {
  revoked_ = true;  // applies nothing more (if still open; closed applies nothing anyway)
  if (rx_copies_->running) {
    // A worker is copying received bytes into device memory: confirmed when it is done
    // (on_stage_flushed then closes the connection).
    rx_copies_->waiters.push_back(std::move(confirmed));
    return;
  }
  drop("revoked by its initiator");
  confirmed();
}

void ServerConn::on_revoke_confirmed(const Header& h, int32_t status) {
  awaiting_revoke_ = false;
  if (closed) return;
  respond(h, status);
  set_interest();
  liveness_ = UNKNOWN;  // time passed: asked afresh before the next chunk is applied
  if (parse()) read_input();
  if (!closed) flush();
}

void ServerConn::respond(const Header& req, int32_t status, uint64_t body, uint64_t body_len, const uint8_t* extra,
                         size_t extra_len) {
  Out o;
  Header h;
  h.op = req.op | OP_RESPONSE;
  h.id = req.id;
  h.status = status;
  h.length = body_len + extra_len;
  encode(h, o.head);
  if (extra_len) std::memcpy(o.head + kHeaderSize, extra, extra_len);
  o.head_len = static_cast<uint32_t>(kHeaderSize + extra_len);
  o.body = body;
  o.body_len = body_len;
  o.seq = next_seq_++;
  out_.push_back(o);
  if (out_.size() >= kPauseOut && !input_paused_) {
    input_paused_ = true;
    set_interest();
  }
}

// A WRITE is applied (and a NOTIFY delivered) only while its initiator still holds the
// connection. An initiator closes it before it settles a cancelled batch, so bytes still
// queued here (a stopped or slow target) never land after the batch settled. TCP reports
// the close (FIN: CLOSE_WAIT, RST: CLOSE) before the bytes queued ahead of it are read.
// Asked once per received chunk, only when something is about to be applied.
bool ServerConn::initiator_connected() {
  if (revoked_) liveness_ = GONE;
  if (liveness_ == UNKNOWN) {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    bool up = getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_ESTABLISHED;
    liveness_ = up ? CONNECTED : GONE;
  }
  if (liveness_ == CONNECTED) return true;
  drop("the initiator closed the connection; its unapplied requests are discarded");
  return false;
}

bool ServerConn::stage_flush() {
  if (stage_fill_ == 0) return false;
  const uint64_t len = stage_fill_;
  const uint64_t dst = stage_dst_;
  stage_dst_ += len;
  if (body_status_ != te::TE_OK) {
    stage_fill_ = 0;
    return false;
  }
  if (!initiator_connected()) return false;
  rx_busy_ = true;
  set_interest();
  Transport* t = t_;
  Loop* loop = loop_;
  rx_copies_->running = true;
  std::string listed = served_ ? std::string(reinterpret_cast<const char*>(client_nonce_), kNonceSize) : std::string();
  t_->workers().run([this, t, loop, stager = rx_stage_, device = stage_device_, dst, len, alive = std::weak_ptr<bool>(alive_),
                     copies = rx_copies_, listed = std::move(listed)] {
    std::string why;
    te::Lease l;
    int32_t s = t->registry().acquire(dst, len, true, l);
    if (s != te::TE_OK)
      s = te::TE_MEMORY_NOT_REGISTERED;  // unregistered while the body arrived
    else
      s = stager->to_device(device, dst, stager->data(), len, &why);
    loop->post([this, t, s, alive, copies, listed] {
      copies->running = false;
      if (!alive.expired()) on_stage_flushed(s);
      // The copy is done: revocations that waited for it are confirmed now, and a connection
      // that closed meanwhile leaves the list.
      std::vector<std::function<void()>> waiters;
      waiters.swap(copies->waiters);
      for (auto& confirm : waiters) confirm();
      if (!listed.empty() && (alive.expired() || closed))
        t->served().remove(reinterpret_cast<const uint8_t*>(listed.data()), copies.get());
    });
  });
  return true;
}

void ServerConn::on_stage_flushed(int32_t status) {
  rx_busy_ = false;
  stage_fill_ = 0;
  if (revoked_) {
    drop("revoked by its initiator");
    return;
  }
  // After a failure the rest of the body is drained; the acknowledgement carries the status.
  if (status != te::TE_OK) {
    body_status_ = status;
    mode_ = DRAIN;
  }
  if (closed) return;
  if (in_body_ && body_left_ == 0) finish_body();
  set_interest();
  liveness_ = UNKNOWN;  // time passed: asked afresh before the next chunk is applied
  if (parse()) read_input();
  if (!closed) flush();
}

void ServerConn::start_read_stage(const Out& o, uint64_t from) {
  if (!tx_stage_) tx_stage_ = std::make_shared<Stager>(t_->staging_bytes(), t_->staging_backend());
  uint64_t len = o.body_len - from;
  if (len > tx_stage_->capacity()) len = tx_stage_->capacity();
  tx_busy_ = true;
  tx_seq_ = 0;
  Transport* t = t_;
  Loop* loop = loop_;
  t_->workers().run([this, t, loop, stager = tx_stage_, device = o.device, src = o.body + from, seq = o.seq, from, len,
                     alive = std::weak_ptr<bool>(alive_)] {
    std::string why;
    te::Status st = te::TE_OK;
    uint8_t* buf = stager->buffer(&st, &why);
    if (buf) {
      te::Lease l;
      st = t->registry().acquire(src, len, true, l);
      if (st != te::TE_OK)
        why = "memory unregistered during a READ response";
      else
        st = stager->to_host(device, buf, src, len, &why);
    }
    loop->post([this, seq, from, len, st, why = std::move(why), alive] {
      if (!alive.expired()) on_read_staged(seq, from, len, st, why);
    });
  });
}

void ServerConn::on_read_staged(uint64_t seq, uint64_t from, uint64_t len, int32_t status, const std::string& why) {
  tx_busy_ = false;
  if (closed || out_.empty() || out_.front().seq != seq) return;
  if (status == te::TE_OK) {
    tx_seq_ = seq;
    tx_from_ = from;
    tx_len_ = len;
  } else if (out_off_ == 0) {
    // Nothing of this response was sent: it becomes a refusal with the CUDA status.
    Out& o = out_.front();
    Header h = decode(o.head);
    h.status = status;
    h.length = 0;
    encode(h, o.head);
    o.body_len = 0;
    o.device = kHost;
  } else {
    drop("device memory could not be staged during a READ response: " + why);
    return;
  }
  flush();
}

void ServerConn::flush() {
  while (!closed && !out_.empty()) {
    iovec iov[kMaxResponseIov];
    std::vector<te::Lease> leases;
    size_t n = 0;
    uint64_t skip = out_off_;
    for (size_t i = 0; i < out_.size() && n + 2 <= kMaxResponseIov; ++i) {
      Out& o = out_[i];
      // A device body leaves through the one pinned tx buffer: only as the front response,
      // so the chunk staged before it was fully sent.
      if (o.device != kHost && i != 0) break;
      uint64_t body_skip = skip > o.head_len ? skip - o.head_len : 0;
      if (o.device != kHost && o.body_len != 0 &&
          (o.seq != tx_seq_ || body_skip < tx_from_ || body_skip >= tx_from_ + tx_len_)) {
        // The next chunk is copied from the device on a worker; the response (its header
        // too, so a failed first copy can still become a refusal) waits for it.
        if (!tx_busy_) start_read_stage(o, body_skip);
        break;
      }
      if (skip < o.head_len) iov[n++] = {o.head + skip, o.head_len - skip};
      skip = 0;
      if (o.body_len == 0) continue;
      if (o.device != kHost) {
        iov[n++] = {tx_stage_->data() + (body_skip - tx_from_), tx_from_ + tx_len_ - body_skip};
        if (tx_from_ + tx_len_ < o.body_len) break;  // the rest is staged once this chunk is sent
        continue;
      }
      bool covered = false;
      for (auto& l : leases)
        if (l.covers(o.body, o.body_len)) covered = true;
      if (!covered) {
        te::Lease l;
        if (t_->registry().acquire(o.body, o.body_len, true, l) != te::TE_OK) {
          if (n > 0) break;
          // Unregistered while the answer was being sent: the status already said OK, so the
          // stream cannot continue; the initiator sees CONNECTION_LOST.
          drop("memory unregistered during a READ response");
          return;
        }
        leases.push_back(std::move(l));
      }
      iov[n++] = {reinterpret_cast<void*>(o.body + body_skip), o.body_len - body_skip};
    }
    if (n == 0) break;  // the front response waits for its device copy (on_read_staged)
    ssize_t w = ::writev(fd_, iov, static_cast<int>(n));
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_out_ = true;
        set_interest();
        return;
      }
      if (errno == EINTR) continue;
      drop(std::string("send: ") + strerror(errno));
      return;
    }
    // Less than offered: the send buffer is full; EPOLLOUT says when to go on (no writev
    // spent on EAGAIN).
    const bool full = static_cast<uint64_t>(w) < iov_bytes(iov, n);
    uint64_t left = static_cast<uint64_t>(w);
    active_ |= w > 0;
    while (left > 0 && !out_.empty()) {
      uint64_t total = out_.front().head_len + out_.front().body_len - out_off_;
      if (left >= total) {
        left -= total;
        out_off_ = 0;
        out_.pop_front();
      } else {
        out_off_ += left;
        left = 0;
      }
    }
    if (full) {
      want_out_ = true;
      set_interest();
      return;
    }
  }
  if (closed) return;
  if (out_.empty() && close_after_flush_) {
    drop("handshake refused");
    return;
  }
  // A response waiting for its device copy needs no writability events (on_read_staged flushes).
  want_out_ = !out_.empty() && !tx_busy_;
  if (input_paused_ && out_.size() <= kResumeOut) {
    input_paused_ = false;
    set_interest();
    // Requests may already be buffered; continue parsing them (asking TCP afresh whether
    // the initiator is still there: time passed since they were received).
    liveness_ = UNKNOWN;
    if (!parse()) return;
    if (!closed && !out_.empty()) {
      flush();
      return;
    }
  }
  set_interest();
}

}  // namespace tetcp
