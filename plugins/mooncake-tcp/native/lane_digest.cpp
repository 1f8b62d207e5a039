// Lane: verified writes (wire.h, kFlagDigest). The digest of a write's body is taken piece by
// piece just before the piece is offered to the socket, so the kernel's send copy reads it
// from the cache instead of memory: the pieces of one write in order, one write at a time
// (frames go out in order, and a write's next piece waits until the previous one was sent).
#include "lane.h"

namespace tetcp {

bool Lane::digest_ahead(Slice* s, const StridedRows* rows, bool staged, uint64_t body_skip, uint64_t* fresh) {
  if (body_skip != s->digest_at || s->digest_at == s->len || *fresh >= kDigestPiece) return true;
  if (s->digest_at == 0) {
    tx_digest_.reset();
    tx_digest_slice_ = s;
  } else if (tx_digest_slice_ != s) {
    // Another write was digested since this one's first piece: its digest cannot go on, and
    // part of it is on the wire already.
    mark_sent_unconfirmed();
    fail(te::TE_INTERNAL, "verified write: its digest was interrupted mid-body");
    return false;
  }
  const uint64_t at = s->digest_at;
  uint64_t take = s->len - at;
  if (take > kDigestPiece - *fresh) take = kDigestPiece - *fresh;
  if (staged) {
    tx_digest_.update(tx_stage_->data() + at, take);
  } else if (rows && rows->width < kNarrowRowWidth) {
    pack_rows(s, *rows, at);  // sent from the pack buffer: digested there
    if (take > pack_from_ + pack_len_ - at) take = pack_from_ + pack_len_ - at;
    tx_digest_.update(pack_.get() + (at - pack_from_), take);
  } else if (rows) {
    rows->walk(Batch::packed_offset(s) + at, take, [this](uint64_t a, uint64_t n) {
      tx_digest_.update(reinterpret_cast<const void*>(a), n);
      return true;
    });
  } else {
    tx_digest_.update(reinterpret_cast<const void*>(s->local + at), take);
  }
  s->digest_at = at + take;
  *fresh += take;
  if (s->digest_at == s->len) s->digest = tx_digest_.value();
  return true;
}

int32_t Lane::check_digest(const Slice* s, uint64_t digest) const {
  // Every byte was digested before it was sent, and the answer comes after the last one.
  if (s->digest_at != s->len || digest != s->digest) return te::TE_DATA_CORRUPTED;
  return te::TE_OK;
}

}  // namespace tetcp
