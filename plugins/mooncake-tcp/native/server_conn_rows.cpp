// Target connection: WRITE_ROWS frames (see wire.h). The row table is received as a control
// body; the rows are checked against the request's span, and the span against this
// process's registrations, before any byte lands; the bytes then go straight into the rows
// (an iovec per row piece) or, refused, are drained.
#include <sys/uio.h>

#include "server_conn.h"

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
  start_body(s == te::TE_OK ? DIRECT : DRAIN, cur_.addr, len);
  if (s == te::TE_OK) {
    rows_ = rows;
    rows_body_ = true;
  }
}

ssize_t ServerConn::recv_rows(bool* unregistered, uint64_t* asked, uint64_t* to_bodies) {
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

bool ServerConn::copy_into_rows(const uint8_t* src, uint64_t len) {
  uint64_t lo = 0, hi = 0;
  rows_.span(body_dst_, len, &lo, &hi);
  te::Lease lease;
  if (t_->registry().acquire(lo, hi - lo, true, lease) != te::TE_OK) return false;
  rows_.copy_in(body_dst_, len, src);
  return true;
}

}  // namespace tetcp
