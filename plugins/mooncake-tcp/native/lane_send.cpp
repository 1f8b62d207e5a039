// Lane: moving queued slices into the window and writing their frames (bodies straight
// from registered memory, device bodies through the pinned tx buffer).
#include "lane.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace tetcp {

namespace {
constexpr size_t kMaxIov = 512;
constexpr size_t kMaxInflightSlices = 8192;

uint64_t frame_bytes(const Slice* s) {
  return kHeaderSize + (s->op == OP_READ ? 0 : s->len);
}
}  // namespace

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

}  // namespace tetcp
