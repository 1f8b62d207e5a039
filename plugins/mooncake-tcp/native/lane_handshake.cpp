// Lane: connecting and the handshake (HELLO, epoch check, AUTH) up to READY.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lane.h"
#include "te/epoch.h"
#include "te/hmac_sha256.h"

namespace tetcp {

namespace {
bool resolve(const std::string& host, uint16_t port, sockaddr_storage* out, socklen_t* len) {
  std::memset(out, 0, sizeof *out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(sockaddr_in6);
    return true;
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  if (res->ai_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(out)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(out)->sin6_port = htons(port);
  freeaddrinfo(res);
  return true;
}
}  // namespace

void Lane::start_connect() {
  std::string sticky_msg;
  if (int32_t sticky = peer_->sticky_failure(&sticky_msg)) {
    fail(sticky, sticky_msg);
    return;
  }
  sockaddr_storage sa;
  socklen_t salen = 0;
  if (!resolve(peer_->host, peer_->port, &sa, &salen)) {
    fail(te::TE_PEER_UNREACHABLE, "cannot resolve host " + peer_->host);
    return;
  }
  fd_ = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  lowat_ = 1;
  if (fd_ < 0) {
    fail(te::TE_INTERNAL, "socket(): " + errstr(errno));
    return;
  }
  tune_socket(fd_, peer_->owner->options());
  // Every close of a lane is abortive (close_connection), and so is the kernel's close when
  // this process dies: a graceful close would leave the socket orphaned in the kernel, still
  // sending the WRITE bytes queued in its send buffer, and the target (which applies bytes
  // while the connection is established) would write them into memory its application may
  // already have freed because this process is gone. An RST discards them.
  linger abortive{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  deadline_ = now_ms() + peer_->owner->options().connect_timeout_ms;
  int r = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), salen);
  if (r < 0 && errno != EINPROGRESS) {
    fail(te::TE_PEER_UNREACHABLE, "connect to " + peer_->label() + ": " + errstr(errno));
    return;
  }
  state_ = CONNECTING;
  interest_ = EPOLLOUT | EPOLLIN;
  loop_->add(fd_, interest_, this);
}

void Lane::send_ctrl(const Header& h, const uint8_t* body, size_t len) {
  size_t at = ctrl_out_.size();
  ctrl_out_.resize(at + kHeaderSize + len);
  encode(h, ctrl_out_.data() + at);
  if (len) std::memcpy(ctrl_out_.data() + at + kHeaderSize, body, len);
}

void Lane::on_connected() {
  int err = 0;
  socklen_t l = sizeof err;
  getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &l);
  if (err != 0) {
    fail(te::TE_PEER_UNREACHABLE, "connect to " + peer_->label() + ": " + errstr(err));
    return;
  }
  const std::string& name = peer_->owner->options().segment_name;
  if (name.size() > kMaxPeerName) {
    // Targets refuse it (and the u16 length field could not carry much more): say why here.
    fail(te::TE_INVALID_ARGUMENT,
         "this segment's name is " + std::to_string(name.size()) + " bytes; targets accept names of at most " +
             std::to_string(kMaxPeerName) + " bytes",
         true);
    return;
  }
  te::random_bytes(client_nonce_, kNonceSize);
  std::vector<uint8_t> body(8 + kNonceSize + 2 + name.size());
  put64(body.data(), peer_->owner->options().epoch);
  std::memcpy(body.data() + 8, client_nonce_, kNonceSize);
  put16(body.data() + 8 + kNonceSize, static_cast<uint16_t>(name.size()));
  std::memcpy(body.data() + 8 + kNonceSize + 2, name.data(), name.size());
  Header h;
  h.op = OP_HELLO;
  h.addr = peer_->epoch;
  h.length = body.size();
  send_ctrl(h, body.data(), body.size());
  state_ = HELLO;
  flush();
}

void Lane::handshake_done() {
  if (!revoking_.empty() && peer_revokes_) {
    Header h;
    h.op = OP_REVOKE;
    h.length = kNonceSize;
    send_ctrl(h, revoke_nonce_, kNonceSize);
    state_ = REVOKE;  // answered before any request is sent (connectTimeoutMs covers it)
    flush();
    return;
  }
  if (!revoking_.empty())
    settle_revoking("the peer it reconnected to cannot confirm that bytes already on their way were discarded");
  reached_ready();
}

void Lane::on_revoke_answer(int32_t status) {
  // Empty when they settled unconfirmed at their deadline before this answer came.
  if (!revoking_.empty())
    settle_revoking(status == te::TE_OK
                        ? "the peer confirmed that nothing more of it is applied"
                        : std::string("the peer refused to confirm that nothing more of it is applied (") +
                              te::status_name(status) + "): bytes already on their way may still have landed",
                    status == te::TE_OK);
  reached_ready();
}

void Lane::reached_ready() {
  state_ = READY;
  last_used_ = now_ms();
  if (reporting_open_) {
    reporting_open_ = false;
    peer_->lane_opened(te::TE_OK, "");
  }
  refill();
  flush();
}

// The target's answer to HELLO or AUTH (its body is in ctrl_body_).
void Lane::on_handshake_answer() {
  const Options& o = peer_->owner->options();
  if (state_ == HELLO) {
    if (cur_.status != te::TE_OK) {
      fail(cur_.status,
           "peer " + peer_->label() + " refused the connection: " + te::status_name(cur_.status) +
               (cur_.status == te::TE_STALE_DESCRIPTOR ? " (it restarted: its epoch changed)" : ""),
           cur_.status == te::TE_STALE_DESCRIPTOR || cur_.status == te::TE_PROTOCOL_MISMATCH ||
               cur_.status == te::TE_AUTH_FAILED);
      return;
    }
    if (ctrl_body_.size() < kNonceSize + 1) {
      fail(te::TE_BAD_FRAME, "short HELLO answer from " + peer_->label());
      return;
    }
    server_epoch_ = cur_.addr;
    if (server_epoch_ != peer_->epoch) {
      fail(te::TE_STALE_DESCRIPTOR,
           "peer " + peer_->label() + " has epoch " + std::to_string(server_epoch_) + ", the descriptor says " +
               std::to_string(peer_->epoch),
           true);
      return;
    }
    std::memcpy(server_nonce_, ctrl_body_.data(), kNonceSize);
    bool auth_required = ctrl_body_[kNonceSize] != 0;
    const uint8_t features = ctrl_body_.size() > kNonceSize + 1 ? ctrl_body_[kNonceSize + 1] : 0;
    peer_revokes_ = (features & kFeatureRevoke) != 0;
    peer_writev_ = (features & kFeatureWriteV) != 0 && peer_->owner->options().coalesce_writes;
    peer_rows_ = (features & kFeatureRows) != 0;
    peer_digest_ = (features & kFeatureDigest) != 0;
    if (auth_required != !o.secret.empty()) {
      fail(te::TE_AUTH_FAILED,
           auth_required ? "peer " + peer_->label() + " requires a shared secret (set TE_TCP_AUTH_SECRET / authSecret)"
                         : "peer " + peer_->label() + " does not authenticate, but this side has a shared secret",
           true);
      return;
    }
    if (!auth_required) {
      handshake_done();
      return;
    }
    uint8_t epoch_le[8];
    put64(epoch_le, server_epoch_);
    te::Bytes parts[5] = {{kClientLabel, std::strlen(kClientLabel)},
                          {client_nonce_, kNonceSize},
                          {server_nonce_, kNonceSize},
                          {epoch_le, 8},
                          {o.segment_name.data(), o.segment_name.size()}};
    uint8_t mac[kMacSize];
    te::hmac_sha256(o.secret.data(), o.secret.size(), parts, 5, mac);
    Header h;
    h.op = OP_AUTH;
    h.length = kMacSize;
    send_ctrl(h, mac, kMacSize);
    state_ = AUTH;
    flush();
    return;
  }
  if (state_ == AUTH) {
    if (cur_.status != te::TE_OK || ctrl_body_.size() != kMacSize) {
      fail(te::TE_AUTH_FAILED, "peer " + peer_->label() + " rejected the shared secret", true);
      return;
    }
    te::Bytes parts[3] = {
        {kServerLabel, std::strlen(kServerLabel)}, {server_nonce_, kNonceSize}, {client_nonce_, kNonceSize}};
    uint8_t mac[kMacSize];
    te::hmac_sha256(o.secret.data(), o.secret.size(), parts, 3, mac);
    if (!te::equal_ct(mac, ctrl_body_.data(), kMacSize)) {
      fail(te::TE_AUTH_FAILED, "peer " + peer_->label() + " could not prove it knows the shared secret", true);
      return;
    }
    handshake_done();
  }
}

}  // namespace tetcp
