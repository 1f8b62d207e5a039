// Target connection: the read loop, frame parsing, and the body modes a request's bytes go
// through (DIRECT into registered memory, STAGED through pinned staging to a device, CTRL
// into a control body, DRAIN dropped).
#include <cerrno>
#include <cstring>

#include "recv_buffer.h"
#include "server_conn.h"

namespace tetcp {

namespace {
// Receive buffer: small until the handshake is done (a connection that never completes it
// costs little), then kServerReadBuffer; freed when idle.
constexpr size_t kHandshakeReadBuffer = 4 * 1024;
}  // namespace

void ServerConn::read_input() {
  read_available();
  if (!closed) tune_lowat();
}

// The mark (recv_buffer.h) while a body arrives in place, into rows or as a WRITEV's segments.
void ServerConn::tune_lowat() {
  uint64_t left = 0;
  if (in_body_ && mode_ == DIRECT && rbuf_.empty()) {
    // What the peer sends without waiting for this side: the rest of the frame's body (a
    // WRITEV's later segments included).
    left = body_left_;
    if (cur_.op == OP_WRITEV && !vec_.table)
      for (size_t i = vec_.at + 1; i < vec_.segs.size() && left < kLowatMax; ++i) left += vec_.segs[i].length;
  }
  set_lowat(fd_, lowat_for(left, t_->options().socket_buffer), &lowat_);
}

void ServerConn::read_available() {
  for (int rounds = 0; rounds < 64 && !closed && !input_held() && !close_after_flush_; ++rounds) {
    // A large body with nothing buffered goes to its destination without the buffer; so do
    // a WRITEV's segments into host memory, a run of them per receive.
    const bool segments = in_body_ && mode_ == DIRECT && cur_.op == OP_WRITEV && body_left_ <= kDirectChunk;
    const bool rows = in_body_ && mode_ == DIRECT && rows_body_;
    const bool in_place = in_body_ && (mode_ == DIRECT || mode_ == STAGED) && rbuf_.empty() &&
                          (body_left_ >= kDirectMin || segments || rows);
    ssize_t r;
    uint64_t asked = 0;
    uint64_t to_bodies = body_left_;  // of what the receive asked for, the bytes for body destinations
    if (in_place && mode_ == DIRECT) {
      if (!initiator_connected()) return;
      bool unregistered = false;
      if (rows) {
        r = recv_rows(&unregistered, &asked, &to_bodies);
      } else if (segments) {
        r = recv_segments(&unregistered, &asked, &to_bodies);
      } else {
        // The body's last part brings the next frame's header with it, when it has arrived.
        const uint64_t most = receive_most();
        r = body_left_ <= most
                ? recv_body_end(fd_, t_->registry(), true, body_dst_, body_left_, rbuf_, kServerReadBuffer, kHeaderSize,
                                &unregistered, &asked)
                : recv_into_registered(fd_, t_->registry(), true, body_dst_, most, &unregistered, &asked);
      }
      if (unregistered) {
        // Unregistered while the body arrived: the rest is drained, the ack says so.
        mode_ = DRAIN;
        body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        continue;
      }
    } else if (in_place) {
      // Device destination: into rx staging, copied to the device when it is full.
      uint64_t room = rx_stage_->capacity() - stage_fill_;
      r = recv_in_place(fd_, reinterpret_cast<uint64_t>(rx_stage_->data() + stage_fill_),
                        body_left_ < room ? body_left_ : room, &asked);
    } else {
      const size_t cap = state_ == READY ? kServerReadBuffer : kHandshakeReadBuffer;
      r = rbuf_.fill(fd_, cap, read_most(cap), &asked);
    }
    const bool socket_empty = drained(r, asked);
    liveness_ = UNKNOWN;
    const RecvNext next =
        after_recv(r, [this](int err) { drop(err ? std::string("recv: ") + strerror(err) : "peer closed"); });
    if (next == RecvNext::STOP) return;
    if (next == RecvNext::RETRY) continue;
    active_ = true;
    if (!in_place) {
      if (!parse()) return;
      if (socket_empty) return;
      continue;
    }
    // The rest went to rbuf_ (the next frame's header).
    uint64_t landed = static_cast<uint64_t>(r) < to_bodies ? static_cast<uint64_t>(r) : to_bodies;
    for (;;) {
      const uint64_t got = landed < body_left_ ? landed : body_left_;
      landed -= got;
      body_left_ -= got;
      if (mode_ == STAGED) {
        digest_landed(reinterpret_cast<uint64_t>(rx_stage_->data() + stage_fill_), got);
        stage_fill_ += got;
        if (stage_fill_ == rx_stage_->capacity() || body_left_ == 0) {
          const bool handed_over = stage_flush();
          if (closed || handed_over) return;  // resumed (and the body finished) by on_stage_flushed
        }
      } else {
        // Narrow rows were digested in their bounce buffer (recv_rows_bounced).
        if (!rows_body_ || rows_.width >= kNarrowRowWidth) digest_landed(body_dst_, got);
        body_dst_ += got;
      }
      if (body_left_ != 0) break;
      finish_body();  // a WRITEV segment: the next one is current now, and took the bytes after it
      if (closed) return;
      if (landed == 0) break;
    }
    if (!rbuf_.empty() && !parse()) return;  // the next frame's header came with this body
    if (closed || socket_empty) return;
  }
}

ssize_t ServerConn::recv_segments(bool* unregistered, uint64_t* asked, uint64_t* to_bodies) {
  te::Lease lease;
  *unregistered = t_->registry().acquire(body_dst_, body_left_, true, lease) != te::TE_OK;
  if (*unregistered) return 0;
  iovec iov[kMaxSegments + 1];
  std::vector<te::Lease> leases;
  size_t n = 0;
  iov[n++] = {reinterpret_cast<void*>(body_dst_), body_left_};
  const uint64_t most = receive_most();
  const bool to_end = next_segments(iov, &n, kMaxSegments, most > body_left_ ? most - body_left_ : 0, &leases);
  *to_bodies = iov_bytes(iov, n);
  return recv_bodies(iov, n, *to_bodies, to_end, asked);
}

ssize_t ServerConn::recv_bodies(iovec* iov, size_t n, uint64_t bytes, bool to_end, uint64_t* asked) {
  size_t room = 0;
  // Up to the frame's end: the next frame's header comes in the same receive, when it has arrived.
  if (to_end) {
    uint8_t* tail = rbuf_.tail(kServerReadBuffer, kHeaderSize, &room);
    iov[n++] = {tail, room};
  }
  *asked = bytes + room;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n;
  const ssize_t r = ::recvmsg(fd_, &msg, 0);
  if (r > 0 && static_cast<uint64_t>(r) > bytes) rbuf_.grew(static_cast<size_t>(r) - bytes);
  return r;
}

// While large WRITEs arrive, a frame's header is received alone, so its body goes to its
// destination directly instead of mostly through the buffer and a second copy (a 64 KiB
// body fit in one buffer fill almost whole). Small frames keep being read many per recv:
// the first one after large writes turns this off again.
bool ServerConn::header_only() const {
  return large_writes_ && state_ == READY && !in_body_ && rbuf_.size() < kHeaderSize;
}

// How much one buffered receive asks for: a header alone (see header_only), a WRITEV or
// WRITE_ROWS table alone (the bytes then go in place), or as much as fits.
size_t ServerConn::read_most(size_t cap) const {
  if (header_only()) return kHeaderSize - rbuf_.size();
  const bool table = (cur_.op == OP_WRITEV && vec_.table) || (cur_.op == OP_WRITE_ROWS && rows_table_);
  if (in_body_ && mode_ == CTRL && table && body_left_ < cap) return static_cast<size_t>(body_left_);
  return cap;
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
        const bool landed = rows_body_ ? copy_into_rows(rbuf_.data(), take)
                                       : copy_into_registered(t_->registry(), true, body_dst_, rbuf_.data(), take);
        if (!landed) {
          mode_ = DRAIN;
          body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        } else if (rows_body_) {
          if (digest_body_) rx_digest_.update(rbuf_.data(), take);  // what copy_into_rows put in the rows
        } else {
          digest_landed(body_dst_, take);
        }
      }  // DRAIN: the bytes stay in the scratch buffer and are dropped
      bool flush_now = false;
      if (mode_ == STAGED) {
        std::memcpy(rx_stage_->data() + stage_fill_, rbuf_.data(), take);
        digest_landed(reinterpret_cast<uint64_t>(rx_stage_->data() + stage_fill_), take);
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

// Every frame starts with its header: checked here, then handed to the handshake or, once
// it is done, to the request it opens.
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
  if (state_ != READY) return on_handshake_header(h);
  large_writes_ = (h.op == OP_WRITE || h.op == OP_WRITEV || h.op == OP_WRITE_ROWS) && h.length >= kDirectMin;
  return on_request_header(h);
}

void ServerConn::start_body(BodyMode m, uint64_t dst, uint64_t len) {
  mode_ = m;
  in_body_ = true;
  rows_body_ = false;  // on_rows_table sets it for a WRITE_ROWS body
  body_left_ = len;
  body_dst_ = dst;
  ctrl_body_.clear();
  if (len == 0) finish_body();
}

void ServerConn::finish_body() {
  in_body_ = false;
  switch (state_) {
    case HELLO:
      finish_hello();
      return;
    case AUTH:
      finish_auth();
      return;
    case READY:
      finish_request();
      return;
  }
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
  t_->workers().run([this, t, loop, stager = rx_stage_, device = stage_device_, dst, len,
                     alive = std::weak_ptr<bool>(alive_), copies = rx_copies_, listed = std::move(listed)] {
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

}  // namespace tetcp
