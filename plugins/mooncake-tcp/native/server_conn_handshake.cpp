// Target connection: the handshake. HELLO names the epoch the initiator expects and its
// nonce; with a shared secret, AUTH proves the initiator knows it and the answer proves the
// target does. Then the connection is ready and listed for REVOKE.
#include <cstring>

#include "server_conn.h"
#include "te/epoch.h"
#include "te/hmac_sha256.h"

namespace tetcp {

bool ServerConn::on_handshake_header(const Header& h) {
  if (state_ == HELLO) {
    if (h.op != OP_HELLO || h.length > kMaxControlBody || h.length < 8 + kNonceSize + 2) {
      drop("expected HELLO");
      return false;
    }
  } else if (h.op != OP_AUTH || h.length != kMacSize) {
    drop("expected AUTH");
    return false;
  }
  start_body(CTRL, 0);
  return !closed;
}

void ServerConn::finish_hello() {
  const Options& o = t_->options();
  HelloBody hello;
  if (!parse_hello(ctrl_body_.data(), ctrl_body_.size(), &hello)) {
    drop("bad HELLO");
    return;
  }
  if (hello.name_len > kMaxPeerName) {
    // Refused before it is kept: the name travels with every notification this
    // connection would deliver (see kMaxPeerName).
    respond(cur_, te::TE_INVALID_ARGUMENT);
    close_after_flush_ = true;
    return;
  }
  std::memcpy(client_nonce_, hello.nonce, kNonceSize);
  peer_name_.assign(reinterpret_cast<const char*>(hello.name), hello.name_len);
  // Always checked: an initiator names the epoch it expects (there is no "any epoch").
  if (cur_.addr != o.epoch) {
    respond(cur_, te::TE_STALE_DESCRIPTOR);
    close_after_flush_ = true;
    return;
  }
  te::random_bytes(server_nonce_, kNonceSize);
  uint8_t extra[kNonceSize + 2];
  std::memcpy(extra, server_nonce_, kNonceSize);
  extra[kNonceSize] = o.secret.empty() ? 0 : 1;
  extra[kNonceSize + 1] = kFeatureRevoke | kFeatureWriteV | kFeatureRows | kFeatureDigest;
  Header h = cur_;
  respond(h, te::TE_OK, 0, 0, extra, sizeof extra);
  out_.back().head[24] = 0;  // addr field: our epoch
  put64(out_.back().head + 24, o.epoch);
  if (o.secret.empty())
    enter_ready();
  else
    state_ = AUTH;
}

void ServerConn::finish_auth() {
  const Options& o = t_->options();
  uint8_t epoch_le[8];
  put64(epoch_le, o.epoch);
  // The proof covers the name the initiator gave in its HELLO: that name is what
  // notifications from this connection carry as their sender.
  te::Bytes parts[5] = {{kClientLabel, std::strlen(kClientLabel)},
                        {client_nonce_, kNonceSize},
                        {server_nonce_, kNonceSize},
                        {epoch_le, 8},
                        {peer_name_.data(), peer_name_.size()}};
  uint8_t mac[kMacSize];
  te::hmac_sha256(o.secret.data(), o.secret.size(), parts, 5, mac);
  if (!te::equal_ct(mac, ctrl_body_.data(), kMacSize)) {
    respond(cur_, te::TE_AUTH_FAILED);
    close_after_flush_ = true;
    return;
  }
  te::Bytes sparts[3] = {
      {kServerLabel, std::strlen(kServerLabel)}, {server_nonce_, kNonceSize}, {client_nonce_, kNonceSize}};
  uint8_t proof[kMacSize];
  te::hmac_sha256(o.secret.data(), o.secret.size(), sparts, 3, proof);
  respond(cur_, te::TE_OK, 0, 0, proof, kMacSize);
  enter_ready();
}

void ServerConn::enter_ready() {
  state_ = READY;
  // Listed under the nonce its initiator chose, so that initiator can revoke it later. A
  // repeated nonce (only a peer that copies another's could send one) is not listed: it
  // cannot be revoked, and the connection listed first keeps its entry.
  served_ = t_->served().add(client_nonce_, ServedConnection{this, loop_, alive_, peer_name_, rx_copies_});
}

}  // namespace tetcp
