// Lane: moving queued slices into the window and writing their frames (bodies straight
// from registered memory, device bodies through the pinned tx buffer).
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "lane.h"

namespace tetcp {

namespace {
constexpr size_t kMaxRequestIov = 512;
constexpr size_t kMaxInflightSlices = 8192;
// WRITEV frames: writes up to kMaxSegmentBytes each ride together, up to kMaxFrameBytes of them.
// Larger writes gain little (their header is a small part of them) and go alone.
constexpr uint64_t kMaxSegmentBytes = 256 * 1024;
constexpr uint64_t kMaxFrameBytes = 1024 * 1024;

uint64_t frame_bytes(const Slice* s) { return s->head_len + (s->op == OP_READ ? 0 : s->len); }

bool can_ride(const Slice* s) {
  return s->op == OP_WRITE && s->device == kHost && s->len <= kMaxSegmentBytes && !s->batch->scatter_of(s);
}
}  // namespace

void Lane::refill() {
  const uint64_t window = peer_->owner->options().window_bytes;
  while (!pending_.empty() && inflight_.size() < kMaxInflightSlices &&
         (inflight_.empty() || inflight_bytes_ + pending_.front()->len <= window)) {
    Slice* s = pending_.front();
    pending_.pop_front();
    if (s->batch->cancelled()) {
      settle(s, s->batch->cancel_status.load(), nullptr);
      continue;
    }
    last_used_ = now_ms();
    s->digest_at = 0;  // (sent again after a reset: digested again)
    if (s->batch->verifies(s) && !peer_digest_) {
      settle(s, te::TE_UNSUPPORTED_OPERATION,
             "the target does not verify writes (no digests of what landed): it runs an earlier mooncake-tcp");
      continue;
    }
    if (const StridedRows* rows = s->batch->scatter_of(s)) {
      if (!peer_rows_) {
        settle(s, te::TE_UNSUPPORTED_OPERATION,
               "the target does not take writes into strided rows (WRITE_ROWS): it runs an earlier mooncake-tcp");
        continue;
      }
      start_rows(s, *rows);
      continue;
    }
    const size_t run = peer_writev_ ? writev_run(s, window) : 0;
    if (run > 0) {
      start_writev(s, run);
      continue;
    }
    Header h;
    h.op = s->op;
    h.id = next_id_++;
    h.addr = s->remote;
    h.length = s->len;
    h.span_addr = s->op == OP_NOTIFY ? 0 : s->span_addr;
    h.span_length = s->op == OP_NOTIFY ? 0 : s->span_len;
    if (s->batch->verifies(s)) h.flags = kFlagDigest;
    encode(h, s->hdr);
    s->frame_n = 1;
    s->head_len = kHeaderSize;
    s->vhead.reset();
    inflight_.push_back(s);
    inflight_bytes_ += s->len;
  }
}

// Slices of the same batch only: a cancel then concerns a whole frame or none of it.
size_t Lane::writev_run(const Slice* s, uint64_t window) const {
  if (!can_ride(s)) return 0;
  uint64_t bytes = s->len;
  size_t run = 0;
  while (run < pending_.size() && run + 1 < kMaxSegments && inflight_.size() + run + 2 <= kMaxInflightSlices) {
    const Slice* next = pending_[run];
    if (next->batch != s->batch || !can_ride(next) || bytes + next->len > kMaxFrameBytes) break;
    if (!inflight_.empty() && inflight_bytes_ + bytes + next->len > window) break;
    bytes += next->len;
    ++run;
  }
  return run;
}

void Lane::start_writev(Slice* s, size_t run) {
  const uint32_t n = static_cast<uint32_t>(run + 1);
  Header h;
  h.op = OP_WRITEV;
  h.id = next_id_++;
  h.addr = n;
  if (s->batch->verifies(s)) h.flags = kFlagDigest;  // its segments are of the same batch
  h.length = n * kSegmentEntry;
  s->vhead.reset(new uint8_t[kHeaderSize + n * kSegmentEntry]);
  for (uint32_t i = 0; i < n; ++i) {
    Slice* seg = i == 0 ? s : pending_[i - 1];
    h.length += seg->len;
    encode_segment(Segment{seg->remote, seg->len, seg->span_addr, seg->span_len},
                   s->vhead.get() + kHeaderSize + i * kSegmentEntry);
  }
  encode(h, s->vhead.get());
  encode(h, s->hdr);  // the answer is matched by the id in hdr
  s->frame_n = n;
  s->head_len = static_cast<uint32_t>(kHeaderSize + n * kSegmentEntry);
  inflight_.push_back(s);
  inflight_bytes_ += s->len;
  for (size_t i = 0; i < run; ++i) {
    Slice* seg = pending_.front();
    pending_.pop_front();
    seg->frame_n = 0;
    seg->head_len = 0;
    seg->digest_at = 0;
    seg->vhead.reset();
    inflight_.push_back(seg);
    inflight_bytes_ += seg->len;
  }
}

void Lane::start_rows(Slice* s, const StridedRows& rows) {
  Header h;
  h.op = OP_WRITE_ROWS;
  h.id = next_id_++;
  if (s->batch->verifies(s)) h.flags = kFlagDigest;
  h.addr = Batch::packed_offset(s);
  h.length = kRowTable + s->len;
  h.span_addr = s->span_addr;
  h.span_length = s->span_len;
  s->vhead.reset(new uint8_t[kHeaderSize + kRowTable]);
  encode(h, s->vhead.get());
  put64(s->vhead.get() + kHeaderSize, rows.width);
  put64(s->vhead.get() + kHeaderSize + 8, rows.pitch);
  encode(h, s->hdr);  // the answer is matched by the id (and op) in hdr
  s->frame_n = 1;
  s->head_len = static_cast<uint32_t>(kHeaderSize + kRowTable);
  inflight_.push_back(s);
  inflight_bytes_ += s->len;
}

void Lane::flush() {
  if (fd_ < 0) return;
  for (;;) {
    iovec iov[kMaxRequestIov + 2];
    std::vector<te::Lease> leases;  // held until the writev is done
    size_t n = 0;
    const size_t ctrl_left = ctrl_out_.size() - ctrl_off_;
    if (ctrl_left) iov[n++] = {ctrl_out_.data() + ctrl_off_, ctrl_left};
    if (state_ == READY && !gather_frames(iov, &n, &leases)) return;
    if (n == 0) {
      want_out_ = false;
      set_interest();
      return;
    }
    ssize_t w = ::writev(fd_, iov, static_cast<int>(n));
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_out_ = true;
        set_interest();
        return;
      }
      fail(te::TE_CONNECTION_LOST, "send to " + peer_->label() + ": " + errstr(errno));
      return;
    }
    // Less than offered: the send buffer is full, so wait for EPOLLOUT rather than spend a
    // writev on EAGAIN (the accounting below still runs).
    const bool full = static_cast<uint64_t>(w) < iov_bytes(iov, n);
    account_sent(static_cast<uint64_t>(w), ctrl_left);
    if (full) {
      want_out_ = true;
      set_interest();
      return;
    }
  }
}

bool Lane::gather_frames(iovec* iov, size_t* n, std::vector<te::Lease>* leases) {
  uint64_t skip = tx_off_;  // what of the first unsent frame is already written
  uint64_t fresh = 0;       // verified writes' bytes digested by this call, not sent yet
  for (size_t i = tx_index_; i < inflight_.size() && *n + 2 <= kMaxRequestIov; ++i) {
    Slice* s = inflight_[i];
    const bool staged = s->device != kHost && s->op == OP_WRITE && s->len;
    if (staged) {
      // Device memory goes out through the pinned tx buffer, one slice at a time: the
      // slice must be the first unsent one, so the buffer's previous slice is gone.
      if (i != tx_index_) break;
      uint64_t id = get64(s->hdr + 16);
      if (tx_staged_id_ != id) {
        // Copied to the tx buffer on a worker; this frame and those behind it wait.
        if (!tx_job_) start_tx_stage(s, id);
        break;
      }
    }
    const uint64_t body_skip = skip > s->head_len ? skip - s->head_len : 0;
    const bool verified = s->batch->verifies(s) && s->len > 0;
    // A verified write's body goes out a digested piece at a time, so its send copies it
    // from the cache: a piece not digested yet waits for the next call, after this one's.
    if (verified && body_skip == s->digest_at && s->digest_at < s->len && fresh >= kDigestPiece) break;
    if (skip < s->head_len) iov[(*n)++] = {const_cast<uint8_t*>(s->head()) + skip, s->head_len - skip};
    skip = 0;
    const StridedRows* rows = staged ? nullptr : s->batch->gather_of(s);
    if (verified && !staged && !lease_body(s, rows, leases)) {  // (held while it is digested, too)
      if (*n > 0) break;                                        // send what precedes it first
      mark_sent_unconfirmed();
      fail(te::TE_CONNECTION_LOST, "local memory unregistered while its write was being sent");
      return false;
    }
    if (verified && !digest_ahead(s, rows, staged, body_skip, &fresh)) return false;
    const uint64_t end = verified ? s->digest_at : s->len;  // offered up to here
    if (staged) {
      iov[(*n)++] = {tx_stage_->data() + body_skip, end - body_skip};
      if (end < s->len) break;
      continue;
    }
    if (s->op == OP_READ || s->len == 0) continue;
    if (s->op == OP_NOTIFY) {
      iov[(*n)++] = {s->batch->notify.data() + body_skip, s->len - body_skip};
      continue;
    }
    if (!verified && !lease_body(s, rows, leases)) {
      if (*n > 0) break;  // send what precedes it first
      // This side gives the connection up, the target did not: what was sent of
      // this write and those before it may still be applied after the reset.
      mark_sent_unconfirmed();
      fail(te::TE_CONNECTION_LOST, "local memory unregistered while its write was being sent");
      return false;
    }
    if (rows && rows->width < kNarrowRowWidth) {
      append_packed(s, *rows, body_skip, iov, n);
      if (verified) iov[*n - 1].iov_len = end - body_skip;  // (packing and digest go piece for piece)
      break;  // the buffer holds one piece: the next call goes on from there
    }
    if (rows) {
      // One iovec per row: as many as the call has room for; the next call goes on from there.
      const uint64_t left = end - body_skip;
      if (rows->append(Batch::packed_offset(s) + body_skip, left, iov, n, kMaxRequestIov - *n) < left) break;
      if (end < s->len) break;
      continue;
    }
    iov[(*n)++] = {reinterpret_cast<void*>(s->local + body_skip), end - body_skip};
    if (end < s->len) break;
  }
  return true;
}

void Lane::append_packed(const Slice* s, const StridedRows& rows, uint64_t body_skip, iovec* iov, size_t* n) {
  pack_rows(s, rows, body_skip);
  const uint64_t off = body_skip - pack_from_;
  iov[(*n)++] = {pack_.get() + off, static_cast<size_t>(pack_len_ - off)};
}

void Lane::pack_rows(const Slice* s, const StridedRows& rows, uint64_t body_skip) {
  if (pack_slice_ != s || body_skip < pack_from_ || body_skip >= pack_from_ + pack_len_) {
    if (!pack_) pack_.reset(new uint8_t[kRowBounceBytes]);
    const uint64_t left = s->len - body_skip;
    const uint64_t take = left < kRowBounceBytes ? left : kRowBounceBytes;
    rows.copy_out(Batch::packed_offset(s) + body_skip, take, pack_.get());
    pack_slice_ = s;
    pack_from_ = body_skip;
    pack_len_ = take;
    peer_->owner->note_rows_packed(take);
  }
}

bool Lane::lease_body(const Slice* s, const StridedRows* rows, std::vector<te::Lease>* leases) {
  uint64_t lo = s->local, hi = s->local + s->len;
  if (rows) rows->span(Batch::packed_offset(s), s->len, &lo, &hi);
  for (const auto& l : *leases)
    if (l.covers(lo, hi - lo)) return true;
  te::Lease l;
  if (peer_->owner->registry().acquire(lo, hi - lo, false, l) != te::TE_OK) return false;
  leases->push_back(std::move(l));
  return true;
}

void Lane::account_sent(uint64_t written, size_t ctrl_left) {
  uint64_t left = written;
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
      pack_slice_ = nullptr;
    } else {
      tx_off_ += left;
      left = 0;
    }
  }
}

te::Status Lane::stage_write(Transport* owner, Stager* stager, Slice* s, std::string* why) {
  te::Status st = te::TE_OK;
  uint8_t* buf = stager->buffer(&st, why);
  if (!buf) return st;
  if (s->len > stager->capacity()) {
    *why = "slice larger than the staging buffer";
    return te::TE_INTERNAL;
  }
  te::Lease l;
  st = owner->registry().acquire(s->local, s->len, false, l);
  if (st != te::TE_OK) {
    *why = "local memory unregistered while its write was being sent";
    return st;
  }
  return stager->to_host(s->device, buf, s->local, s->len, why);
}

void Lane::start_tx_stage(Slice* s, uint64_t id) {
  if (!tx_stage_) tx_stage_ = std::make_unique<Stager>(peer_->owner->staging_bytes(), peer_->owner->staging_backend());
  tx_job_ = s;
  tx_job_settled_ = false;
  Transport* owner = peer_->owner;
  Stager* stager = tx_stage_.get();
  // The job keeps the peer, and so this lane and its buffers, alive until its result ran.
  owner->workers().run([this, owner, stager, s, id, keep = peer_->shared_from_this()] {
    std::string why;
    int32_t status = stage_write(owner, stager, s, &why);
    loop_->post([this, s, id, status, why = std::move(why), keep] { on_tx_staged(s, id, status, why); });
  });
}

void Lane::on_tx_staged(Slice* s, uint64_t id, int32_t status, const std::string& why) {
  tx_job_ = nullptr;
  if (tx_job_settled_) {
    // The lane failed or the batch was cancelled while the copy ran: it settles now.
    tx_job_settled_ = false;
    std::string reason;
    reason.swap(tx_job_why_);
    s->batch->complete(s, tx_job_status_, reason.empty() ? nullptr : reason.c_str());
  } else if (fd_ >= 0 && state_ == READY && tx_index_ < inflight_.size() && inflight_[tx_index_] == s && tx_off_ == 0 &&
             get64(s->hdr + 16) == id) {
    if (status == te::TE_OK) {
      tx_staged_id_ = id;
    } else {
      // Nothing of this frame was sent: it leaves the stream and fails alone.
      inflight_.erase(inflight_.begin() + static_cast<std::ptrdiff_t>(tx_index_));
      inflight_bytes_ -= s->len;
      s->batch->complete(s, status, why.c_str());
    }
  }
  // Otherwise the connection was reset meanwhile and the slice waits in pending_: it is
  // staged again when it is next at the front.
  if (closed) return;
  if (state_ == READY) {
    refill();
    flush();
  }
}

void Lane::settle(Slice* s, int32_t status, const char* why) {
  if (s == tx_job_) {
    if (!tx_job_settled_) {
      tx_job_settled_ = true;
      tx_job_status_ = status;
      tx_job_why_ = why ? why : "";
    }
    return;
  }
  s->batch->complete(s, status, why);
}

}  // namespace tetcp
