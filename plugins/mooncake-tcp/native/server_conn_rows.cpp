// Target connection: WRITE_ROWS frames (see wire.h). The row table is received as a control
// body; the rows are checked against the request's span, and the span against this
// process's registrations, before any byte lands; the bytes then go into the rows or,
// refused, are drained. Wide rows are received straight into them (an iovec per row piece);
// narrow ones (a few heads of an NHD page) through a small bounce buffer that stays in the
// cache, then into the rows with streaming stores: receiving straight into 512-byte rows costs
// the kernel a read of every destination line before its write, twice the memory traffic.
#include <sys/uio.h>

#include "server_conn.h"
#include "te/streaming_copy.h"

namespace tetcp {

namespace {
// Row pieces one receive fills at most (IOV_MAX is 1024; one more iovec takes the next header).
constexpr size_t kMaxRowIov = 512;
}  // namespace

bool ServerConn::on_rows_header(const Header& h) {
  if (h.length <= kRowTable || h.length - kRowTable > kMaxBody) {
    drop("bad WRITE_ROWS header");
    return false;
  }
  rows_table_ = true;
  start_body(CTRL, 0, kRowTable);
  return !closed;
}

void ServerConn::on_rows_table() {
  rows_table_ = false;
  const uint64_t width = get64(ctrl_body_.data());
  const uint64_t pitch = get64(ctrl_body_.data() + 8);
  const uint64_t len = cur_.length - kRowTable;
  StridedRows rows;
  uint64_t capacity = 0;
  int32_t s = StridedRows::of_span(cur_.span_addr, cur_.span_length, width, pitch, &rows, &capacity);
  // The slice's packed bytes must lie within what the rows hold.
  if (s == te::TE_OK && (cur_.addr > capacity || len > capacity - cur_.addr)) s = te::TE_INVALID_ARGUMENT;
  if (s == te::TE_OK) s = t_->registry().check(cur_.span_addr, cur_.span_length, true);
  if (s == te::TE_OK && t_->devices().device_of(cur_.span_addr) != kHost) s = te::TE_MEMORY_KIND_UNSUPPORTED;
  body_status_ = s;
  start_digest(s);
  start_body(s == te::TE_OK ? DIRECT : DRAIN, cur_.addr, len);
  if (s == te::TE_OK) {
    rows_ = rows;
    rows_body_ = true;
  }
}

ssize_t ServerConn::recv_rows(bool* unregistered, uint64_t* asked, uint64_t* to_bodies) {
  if (rows_.width < kNarrowRowWidth) return recv_rows_bounced(unregistered, asked, to_bodies);
  const uint64_t want = body_left_ < kDirectChunk ? body_left_ : kDirectChunk;
  iovec iov[kMaxRowIov + 1];
  size_t n = 0;
  const uint64_t bytes = rows_.append(body_dst_, want, iov, &n, kMaxRowIov);
  uint64_t lo = 0, hi = 0;
  rows_.span(body_dst_, bytes, &lo, &hi);
  te::Lease lease;
  *unregistered = t_->registry().acquire(lo, hi - lo, true, lease) != te::TE_OK;
  if (*unregistered) return 0;
  *to_bodies = bytes;
  return recv_bodies(iov, n, bytes, bytes == body_left_, asked);
}

ssize_t ServerConn::recv_rows_bounced(bool* unregistered, uint64_t* asked, uint64_t* to_bodies) {
  const uint64_t want = body_left_ < kRowBounceBytes ? body_left_ : kRowBounceBytes;
  uint64_t lo = 0, hi = 0;
  rows_.span(body_dst_, want, &lo, &hi);
  te::Lease lease;  // held until the bytes are in the rows
  *unregistered = t_->registry().acquire(lo, hi - lo, true, lease) != te::TE_OK;
  if (*unregistered) return 0;
  if (!row_bounce_) row_bounce_.reset(new uint8_t[kRowBounceBytes]);
  iovec iov[2] = {{row_bounce_.get(), want}};
  *to_bodies = want;
  const ssize_t r = recv_bodies(iov, 1, want, want == body_left_, asked);
  if (r <= 0) return r;
  const uint64_t got = static_cast<uint64_t>(r) < want ? static_cast<uint64_t>(r) : want;
  if (digest_body_)
    rx_digest_.update(row_bounce_.get(), got);  // in the cache still, unlike the rows after streaming stores
  const uint8_t* src = row_bounce_.get();
  rows_.walk(body_dst_, got, [&](uint64_t a, uint64_t take) {
    te::streaming_copy(reinterpret_cast<uint8_t*>(a), src, take);
    src += take;
    return true;
  });
  te::streaming_fence();  // in the rows before this connection answers for them
  return r;
}

bool ServerConn::copy_into_rows(const uint8_t* src, uint64_t len) {
  uint64_t lo = 0, hi = 0;
  rows_.span(body_dst_, len, &lo, &hi);
  te::Lease lease;
  if (t_->registry().acquire(lo, hi - lo, true, lease) != te::TE_OK) return false;
  rows_.copy_in(body_dst_, len, src);
  return true;
}

}  // namespace tetcp
