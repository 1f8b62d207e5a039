// Target connection: verified writes (wire.h, kFlagDigest). The digest is taken of the bytes
// as they land, each piece right after its receive put it in the cache (in place, into the
// rows' bounce buffer, or into rx staging for device memory), and goes back in the answer;
// the initiator compares it with its own.
#include "server_conn.h"

namespace tetcp {

void ServerConn::start_digest(int32_t status) {
  digest_body_ = (cur_.flags & kFlagDigest) != 0 && status == te::TE_OK;
  if (digest_body_) rx_digest_.reset();
}

void ServerConn::digest_landed(uint64_t at, uint64_t len) {
  if (!digest_body_ || len == 0) return;
  if (mode_ == STAGED) {
    rx_digest_.update(reinterpret_cast<const void*>(at), len);
  } else if (mode_ != DIRECT) {
    return;  // refused or unregistered meanwhile: the answer carries that status, no digest
  } else if (rows_body_) {
    rows_.walk(at, len, [this](uint64_t a, uint64_t take) {
      rx_digest_.update(reinterpret_cast<const void*>(a), take);
      return true;
    });
  } else {
    rx_digest_.update(reinterpret_cast<const void*>(at), len);
  }
}

void ServerConn::respond_write(const Header& req, int32_t status) {
  respond(req, status);
  if (!(req.flags & kFlagDigest) || status != te::TE_OK || !digest_body_) return;
  uint8_t* head = out_.back().head;
  head[7] = kFlagDigest;
  put64(head + 24, rx_digest_.value());
}

}  // namespace tetcp
