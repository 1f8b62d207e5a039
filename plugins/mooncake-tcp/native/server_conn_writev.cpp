// Target connection: WRITEV frames (see wire.h). The table is received as a control body and
// checked whole; then each segment goes through the same body modes as a WRITE of its own
// (validated, into host memory in place, through staging to a device, or drained when
// refused), and one answer reports every segment.
#include "server_conn.h"

namespace tetcp {

bool ServerConn::on_writev_header(const Header& h) {
  const uint64_t n = h.addr;
  if (n == 0 || n > kMaxSegments || h.length < n * kSegmentEntry || h.length - n * kSegmentEntry > kMaxBody) {
    drop("bad WRITEV header");
    return false;
  }
  vec_.table = true;
  vec_.segs.clear();
  vec_.status.clear();
  vec_.device.clear();
  vec_.at = 0;
  start_body(CTRL, 0, n * kSegmentEntry);
  return !closed;
}

void ServerConn::on_writev_table() {
  vec_.table = false;
  const uint32_t n = static_cast<uint32_t>(cur_.addr);
  uint64_t total = 0;
  vec_.segs.resize(n);
  vec_.status.resize(n);
  vec_.device.resize(n);
  vec_.digests.assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const Segment seg = decode_segment(ctrl_body_.data() + i * kSegmentEntry);
    // An empty segment or lengths that do not add up to the body: a malformed frame.
    if (seg.length == 0 || seg.length > kMaxBody || (total += seg.length) > kMaxBody) {
      drop("bad WRITEV segment");
      return;
    }
    vec_.segs[i] = seg;
    vec_.status[i] = validate(seg.addr, seg.length, seg.span_addr, seg.span_length);
    vec_.device[i] = vec_.status[i] == te::TE_OK ? t_->devices().device_of(seg.addr) : kHost;
  }
  if (total != cur_.length - n * kSegmentEntry) {
    drop("WRITEV segments do not add up to its body");
    return;
  }
  start_segment();
}

void ServerConn::start_segment() {
  const Segment& seg = vec_.segs[vec_.at];
  start_write_body(seg.addr, seg.length, vec_.status[vec_.at]);
}

void ServerConn::finish_writev_part() {
  if (vec_.table) {
    on_writev_table();
    return;
  }
  vec_.status[vec_.at] = body_status_;
  if (digest_body_ && body_status_ == te::TE_OK) vec_.digests[vec_.at] = rx_digest_.value();
  if (++vec_.at < vec_.segs.size()) {
    start_segment();
    return;
  }
  int32_t first = te::TE_OK;
  for (int32_t st : vec_.status)
    if (first == te::TE_OK) first = st;
  const bool digests = (cur_.flags & kFlagDigest) != 0;
  if (first == te::TE_OK && !digests) {
    respond(cur_, te::TE_OK);
    return;
  }
  // Statuses (after a failure), then digests (a verified frame): see wire.h.
  uint8_t extra[12 * kMaxSegments];
  const size_t n = vec_.status.size();
  size_t len = 0;
  if (first != te::TE_OK)
    for (size_t i = 0; i < n; ++i, len += 4) put32(extra + len, static_cast<uint32_t>(vec_.status[i]));
  if (digests)
    for (size_t i = 0; i < n; ++i, len += 8) put64(extra + len, vec_.digests[i]);
  respond(cur_, first, 0, 0, extra, len);
  if (digests) out_.back().head[7] = kFlagDigest;
}

bool ServerConn::next_segments(iovec* iov, size_t* n, size_t max, uint64_t budget,
                               std::vector<te::Lease>* leases) const {
  if (cur_.op != OP_WRITEV || vec_.table) return false;
  for (size_t i = vec_.at + 1; i < vec_.segs.size(); ++i) {
    const Segment& seg = vec_.segs[i];
    if (*n >= max || seg.length > budget || vec_.status[i] != te::TE_OK || vec_.device[i] != kHost) return false;
    te::Lease lease;
    // Unregistered meanwhile: it is left out here and found out when it is the current one.
    if (t_->registry().acquire(seg.addr, seg.length, true, lease) != te::TE_OK) return false;
    leases->push_back(std::move(lease));
    iov[(*n)++] = {reinterpret_cast<void*>(seg.addr), seg.length};
    budget -= seg.length;
  }
  return true;
}

}  // namespace tetcp
