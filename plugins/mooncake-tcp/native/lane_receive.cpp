// Lane: reading responses (in order), READ bodies into local memory or rx staging, and
// completing the slices they answer.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "lane.h"

namespace tetcp {

namespace {
constexpr size_t kLaneReadBuffer = 256 * 1024;
}  // namespace

void Lane::read_input() {
  read_available();
  if (fd_ < 0) return;
  // The mark (recv_buffer.h) while a READ's answer arrives in place.
  const bool in_place = in_body_ && !body_drain_ && !body_ctrl_ && !body_staged_ && !rx_job_ && rbuf_.empty();
  set_lowat(fd_, lowat_for(in_place ? body_left_ : 0, peer_->owner->options().socket_buffer), &lowat_);
}

void Lane::read_available() {
  for (int rounds = 0; rounds < 64 && fd_ >= 0 && !rx_job_; ++rounds) {
    // A large READ body with nothing buffered goes to its destination without the buffer.
    const bool in_place = in_body_ && !body_drain_ && !body_ctrl_ && rbuf_.empty() && body_left_ >= kDirectMin;
    ssize_t r;
    uint64_t asked = 0;
    if (in_place && !body_staged_) {
      bool unregistered = false;
      // The body's last part brings the next answer's header with it, when it has arrived.
      r = body_left_ <= kDirectChunk ? recv_body_end(fd_, peer_->owner->registry(), false, body_dst_, body_left_, rbuf_,
                                                     kLaneReadBuffer, kHeaderSize, &unregistered, &asked)
                                     : recv_into_registered(fd_, peer_->owner->registry(), false, body_dst_, body_left_,
                                                            &unregistered, &asked);
      if (unregistered) {
        body_drain_ = true;
        body_status_ = te::TE_MEMORY_NOT_REGISTERED;
        continue;
      }
    } else if (in_place) {
      r = recv_in_place(fd_, body_dst_, body_left_, &asked);  // device destination: body_dst_ is rx staging
    } else {
      r = rbuf_.fill(fd_, kLaneReadBuffer, header_only() ? kHeaderSize - rbuf_.size() : kLaneReadBuffer, &asked);
    }
    const bool socket_empty = drained(r, asked);
    const RecvNext next = after_recv(r, [this](int err) {
      fail(te::TE_CONNECTION_LOST, err ? "receive from " + peer_->label() + ": " + errstr(err)
                                       : "peer " + peer_->label() + " closed the connection");
    });
    if (next == RecvNext::STOP) return;
    if (next == RecvNext::RETRY) continue;
    if (!in_place) {
      if (!parse() || socket_empty) return;
      continue;
    }
    const uint64_t got =
        static_cast<uint64_t>(r) < body_left_ ? static_cast<uint64_t>(r) : body_left_;  // the rest went to rbuf_
    body_dst_ += got;
    body_left_ -= got;
    if (body_left_ == 0) {
      finish_body();
      if (fd_ >= 0 && !rbuf_.empty() && !parse()) return;  // the next answer's header came with this body
    }
    if (socket_empty) return;
  }
}

// True when the next frame is the answer to a large READ into host memory and its header
// is not buffered yet: the header alone is received, so the body goes straight to its
// destination instead of partly through the buffer (a full buffer held up to 256 KiB of
// every 1 MiB body, copied again afterwards). One more recv per answer, no copy.
bool Lane::header_only() const {
  if (in_body_ || state_ != READY || inflight_.empty() || tx_index_ == 0 || rbuf_.size() >= kHeaderSize) return false;
  const Slice* s = inflight_.front();
  return s->op == OP_READ && s->device == kHost && s->len >= kDirectMin;
}

// Consumes buffered bytes; false when the lane failed.
bool Lane::parse() {
  for (;;) {
    if (rx_job_) return true;  // resumed when the device copy is done
    size_t avail = rbuf_.size();
    if (in_body_) {
      if (avail == 0) return true;
      uint64_t take = avail < body_left_ ? avail : body_left_;
      if (body_ctrl_) {
        ctrl_body_.insert(ctrl_body_.end(), rbuf_.data(), rbuf_.data() + take);
      } else if (body_staged_) {
        std::memcpy(reinterpret_cast<void*>(body_dst_), rbuf_.data(), take);
      } else if (!body_drain_) {
        if (!copy_into_registered(peer_->owner->registry(), false, body_dst_, rbuf_.data(), take)) {
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
    fail(te::TE_PROTOCOL_MISMATCH,
         "peer " + peer_->label() + " speaks protocol version " + std::to_string(h.version) + ", this build speaks " +
             std::to_string(kVersion),
         true);
    return false;
  }
  cur_ = h;
  body_status_ = te::TE_OK;
  body_drain_ = false;
  body_ctrl_ = false;
  if (state_ == HELLO || state_ == AUTH) return on_handshake_header(h);
  if (state_ == REVOKE) {
    if (h.op != (OP_REVOKE | OP_RESPONSE) || h.length != 0) {
      fail(te::TE_BAD_FRAME, "unexpected answer to REVOKE from " + peer_->label());
      return false;
    }
    on_revoke_answer(h.status);
    return fd_ >= 0;
  }
  if (state_ != READY || inflight_.empty() || tx_index_ == 0) {
    fail(te::TE_BAD_FRAME, "unsolicited response from " + peer_->label());
    return false;
  }
  Slice* s = inflight_.front();
  const uint8_t op = s->hdr[6];  // the frame's op: WRITEV and WRITE_ROWS frames carry writes
  if (h.id != get64(s->hdr + 16) || h.op != (op | OP_RESPONSE) || tx_index_ < s->frame_n) {
    fail(te::TE_BAD_FRAME, "out-of-order response from " + peer_->label());
    return false;
  }
  if (s->op == OP_READ && h.status == te::TE_OK) return on_read_answer(h, s);
  if (op == OP_WRITEV) return on_writev_answer(h, s);
  if (h.length != 0) {
    fail(te::TE_BAD_FRAME, "response with an unexpected body from " + peer_->label());
    return false;
  }
  const char* why = nullptr;
  std::string refused;
  int32_t status = h.status;
  if (s->batch->verifies(s) && status == te::TE_OK) {
    if (!(h.flags & kFlagDigest)) {
      fail(te::TE_BAD_FRAME, "answer to a verified write without its digest from " + peer_->label());
      return false;
    }
    status = check_digest(s, h.addr);
  }
  if (status == te::TE_DATA_CORRUPTED)
    why = "the bytes that landed at the target differ from those sent (their digests differ)";
  else if (status == te::TE_POOL_EXHAUSTED && s->op == OP_NOTIFY)
    why = "the target's notification queue is full (its listeners are behind); the notification was not delivered";
  else if (status != te::TE_OK)
    why = (refused = refusal(s, status)).c_str();
  complete_front(status, why);
  return fd_ >= 0;
}

bool Lane::on_handshake_header(const Header& h) {
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

bool Lane::on_read_answer(const Header& h, Slice* s) {
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
    stage_read_body(h.length);
  }
  if (h.length == 0) finish_body();
  return fd_ >= 0;
}

void Lane::stage_read_body(uint64_t length) {
  // Device destination: receive into pinned staging, copy to the device when complete.
  if (!rx_stage_) rx_stage_ = std::make_unique<Stager>(peer_->owner->staging_bytes(), peer_->owner->staging_backend());
  te::Status st = te::TE_OK;
  uint8_t* buf = rx_stage_->buffer(&st, &body_why_);
  if (buf && length <= rx_stage_->capacity()) {
    body_staged_ = true;
    body_dst_ = reinterpret_cast<uint64_t>(buf);
  } else {
    body_drain_ = true;
    body_status_ = buf ? te::TE_INTERNAL : st;
    if (buf) body_why_ = "READ response larger than the staging buffer";
  }
}

void Lane::finish_body() {
  in_body_ = false;
  if (body_statuses_) {
    body_statuses_ = false;
    body_ctrl_ = false;
    // Statuses after a failure, then digests of a verified frame (wire.h).
    const bool failed = cur_.status != te::TE_OK;
    const uint8_t* digests =
        (cur_.flags & kFlagDigest) ? ctrl_body_.data() + (failed ? 4 * inflight_.front()->frame_n : 0) : nullptr;
    complete_frame(cur_.status, failed ? ctrl_body_.data() : nullptr, digests);
    return;
  }
  if (body_ctrl_) {
    body_ctrl_ = false;
    on_handshake_answer();
    return;
  }
  if (body_staged_ || !body_why_.empty()) {
    finish_staged_body();
    return;
  }
  complete_front(body_status_, body_status_ ? "local memory unregistered while the READ landed" : nullptr);
}

// A READ body received into rx staging (or refused before it could be staged). A staged
// body is copied to the device on a worker; its slice leaves the stream now (its answer was
// read) and completes when the copy is done, and reading pauses until then.
void Lane::finish_staged_body() {
  Slice* s = inflight_.front();
  std::string why;
  why.swap(body_why_);
  const bool staged = body_staged_;
  body_staged_ = false;
  if (!staged || body_status_ != te::TE_OK) {
    if (body_status_ != te::TE_OK && why.empty()) why = "local memory unregistered while the READ landed";
    complete_front(body_status_, body_status_ ? why.c_str() : nullptr);
    return;
  }
  inflight_.pop_front();
  --tx_index_;
  last_used_ = now_ms();
  inflight_bytes_ -= s->len;
  start_rx_unstage(s);
}

void Lane::start_rx_unstage(Slice* s) {
  rx_job_ = true;
  set_interest();
  Transport* owner = peer_->owner;
  Stager* stager = rx_stage_.get();
  owner->workers().run([this, owner, stager, s, keep = peer_->shared_from_this()] {
    std::string why;
    te::Lease l;
    int32_t status = owner->registry().acquire(s->local, s->len, false, l);
    if (status != te::TE_OK)
      why = "local memory unregistered while the READ landed";
    else
      status = stager->to_device(s->device, s->local, stager->data(), s->len, &why);
    loop_->post([this, s, status, why = std::move(why), keep] { on_rx_unstaged(s, status, why); });
  });
}

void Lane::on_rx_unstaged(Slice* s, int32_t status, const std::string& why) {
  rx_job_ = false;
  int32_t cancel = s->batch->cancel_status.load();
  if (status == te::TE_OK && cancel != 0) status = cancel;
  s->batch->complete(s, status, status ? why.c_str() : nullptr);
  if (closed || fd_ < 0) return;
  set_interest();
  if (!parse()) return;  // answers buffered behind this one first
  read_input();
  if (fd_ >= 0 && state_ == READY && !pending_.empty()) {
    refill();
    flush();
  }
}

// The batch keeps one message for all its failures, while its code may come from another
// request's status: the refusal names its request and status, so the two cannot be confused.
std::string Lane::refusal(const Slice* s, int32_t status) {
  const std::string what = s->req == kNotifyRequest ? "the notification" : "request " + std::to_string(s->req);
  return "the target refused " + what + " (" + te::status_name(status) + ")";
}

void Lane::complete_front(int32_t status, const char* why) {
  pop_front_slice(status, why);
  if (!pending_.empty()) {
    refill();
    flush();
  }
}

void Lane::pop_front_slice(int32_t status, const char* why) {
  Slice* s = inflight_.front();
  if (pack_slice_ == s) pack_slice_ = nullptr;  // its memory may hold the next slice
  inflight_.pop_front();
  --tx_index_;
  last_used_ = now_ms();
  inflight_bytes_ -= s->len;
  int32_t cancel = s->batch->cancel_status.load();
  if (status == te::TE_OK && cancel != 0 && s->op == OP_READ) status = cancel;
  s->batch->complete(s, status, why);
}

// A WRITEV answer: status 0 and no body (every segment applied), or the first failure and
// one status per segment.
bool Lane::on_writev_answer(const Header& h, Slice* s) {
  const bool verified = s->batch->verifies(s);
  const uint64_t want = (h.status == te::TE_OK ? 0 : 4ull * s->frame_n) + (verified ? 8ull * s->frame_n : 0);
  if (h.length != want || verified != ((h.flags & kFlagDigest) != 0)) {
    fail(te::TE_BAD_FRAME, "WRITEV answer of the wrong length from " + peer_->label());
    return false;
  }
  if (want == 0) {
    complete_frame(te::TE_OK, nullptr);
    return fd_ >= 0;
  }
  ctrl_body_.clear();
  body_ctrl_ = true;
  body_statuses_ = true;
  in_body_ = true;
  body_left_ = h.length;
  return fd_ >= 0;
}

void Lane::complete_frame(int32_t status, const uint8_t* statuses, const uint8_t* digests) {
  const uint32_t n = inflight_.front()->frame_n;
  for (uint32_t i = 0; i < n; ++i) {
    int32_t st = statuses ? static_cast<int32_t>(get32(statuses + 4 * i)) : status;
    if (digests && st == te::TE_OK) st = check_digest(inflight_.front(), get64(digests + 8 * i));
    const std::string refused =
        st == te::TE_OK || st == te::TE_DATA_CORRUPTED ? std::string() : refusal(inflight_.front(), st);
    pop_front_slice(st, st == te::TE_OK ? nullptr
                        : st == te::TE_DATA_CORRUPTED
                            ? "the bytes that landed at the target differ from those sent (their digests differ)"
                            : refused.c_str());
  }
  if (!pending_.empty()) {
    refill();
    flush();
  }
}

}  // namespace tetcp
