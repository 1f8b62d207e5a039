// Target connection: responses, queued in request order and sent with writev; READ bodies
// go straight from registered host memory, or through the pinned tx staging buffer chunk by
// chunk from a device. Input pauses while too many responses are queued.
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "server_conn.h"

namespace tetcp {

namespace {
constexpr size_t kMaxResponseIov = 512;
constexpr size_t kPauseOut = 4096;  // stop reading requests while this many responses are queued
constexpr size_t kResumeOut = 1024;
}  // namespace

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

// The iovecs of the queued responses from the front (out_off_ bytes of it already sent), as
// many as go out in one writev; false when the connection was dropped.
bool ServerConn::gather_responses(iovec* iov, size_t* count, std::vector<te::Lease>* leases) {
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
    for (auto& l : *leases)
      if (l.covers(o.body, o.body_len)) covered = true;
    if (!covered) {
      te::Lease l;
      if (t_->registry().acquire(o.body, o.body_len, true, l) != te::TE_OK) {
        if (n > 0) break;
        // Unregistered while the answer was being sent: the status already said OK, so the
        // stream cannot continue; the initiator sees CONNECTION_LOST.
        drop("memory unregistered during a READ response");
        return false;
      }
      leases->push_back(std::move(l));
    }
    iov[n++] = {reinterpret_cast<void*>(o.body + body_skip), o.body_len - body_skip};
  }
  *count = n;
  return true;
}

// Written bytes retire the responses they complete, from the front.
void ServerConn::consume_sent(uint64_t left) {
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
}

void ServerConn::flush() {
  while (!closed && !out_.empty()) {
    iovec iov[kMaxResponseIov];
    std::vector<te::Lease> leases;
    size_t n = 0;
    if (!gather_responses(iov, &n, &leases)) return;
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
    active_ |= w > 0;
    consume_sent(static_cast<uint64_t>(w));
    if (full) {
      want_out_ = true;
      set_interest();
      return;
    }
  }
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
