// The order a lane's control queue gives its messages (Lane::send_ctrl: HELLO, AUTH, REVOKE)
// against request frames, seen from a scripted target on a real loopback socket. After a
// cancel reset a connection, the fresh one carries HELLO, then AUTH where a secret is set,
// then REVOKE naming the reset connection, and only once REVOKE is answered the requests
// that were waiting: a request that overtook the REVOKE could be applied before the target
// confirmed that nothing more of the reset connection lands.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "tcp_node.h"
#include "te/hmac_sha256.h"
#include "wire.h"

using namespace tetcp;
using tcp_test::Node;

namespace {

constexpr uint64_t kTargetEpoch = 0x7777;

/** A listening loopback socket whose connections the test serves by hand. */
class ScriptedTarget {
 public:
  ScriptedTarget() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 4) == 0);
    CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~ScriptedTarget() { ::close(fd_); }
  uint16_t port() const { return port_; }

  /** The next connection (-1 after 5 s); a read on it gives up after 5 s. */
  int accept_one() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return -1;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    timeval tv{5, 0};
    if (c >= 0) ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return c;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

bool read_exact(int fd, void* p, size_t n) {
  auto* at = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, at, n, 0);
    if (r <= 0) return false;
    at += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

/** The next frame on `fd`; false on a timeout, an end of stream or a frame that is not one. */
bool read_frame(int fd, Header* h, std::vector<uint8_t>* body) {
  uint8_t hb[kHeaderSize];
  if (!read_exact(fd, hb, sizeof hb)) return false;
  *h = decode(hb);
  if (h->magic != kMagic || h->length > (1u << 20)) return false;
  body->resize(h->length);
  return read_exact(fd, body->data(), body->size());
}

/** Answers request `req` with `status` and `body`. */
bool answer(int fd, const Header& req, int32_t status, const std::vector<uint8_t>& body = {}) {
  Header h;
  h.op = req.op | OP_RESPONSE;
  h.id = req.id;
  h.status = status;
  h.addr = req.op == OP_HELLO ? kTargetEpoch : 0;
  h.length = body.size();
  std::vector<uint8_t> frame(kHeaderSize + body.size());
  encode(h, frame.data());
  if (!body.empty()) std::memcpy(frame.data() + kHeaderSize, body.data(), body.size());
  return ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == ssize_t(frame.size());
}

std::vector<uint8_t> hmac(const std::string& secret, std::initializer_list<te::Bytes> parts) {
  std::vector<uint8_t> mac(kMacSize);
  te::hmac_sha256(secret.data(), secret.size(), parts.begin(), parts.size(), mac.data());
  return mac;
}

/**
 * Plays the target's part of a handshake on `fd` (the REVOKE feature offered, a shared
 * secret checked where `secret` is set), appending each control frame's op to `ops`;
 * `*nonce` gets the initiator's HELLO nonce. False when a frame is missing or wrong.
 */
bool handshake(int fd, const std::string& secret, std::vector<uint8_t>* nonce, std::vector<uint8_t>* ops) {
  Header h;
  std::vector<uint8_t> body;
  HelloBody hello;
  if (!read_frame(fd, &h, &body)) return false;
  ops->push_back(h.op);
  if (h.op != OP_HELLO || !parse_hello(body.data(), body.size(), &hello) || h.addr != kTargetEpoch) return false;
  nonce->assign(hello.nonce, hello.nonce + kNonceSize);
  const std::string name(reinterpret_cast<const char*>(hello.name), hello.name_len);  // body is read into again
  std::vector<uint8_t> server_nonce(kNonceSize, 0x42);
  std::vector<uint8_t> ack(server_nonce);
  ack.push_back(secret.empty() ? 0 : 1);
  ack.push_back(kFeatureRevoke);
  if (!answer(fd, h, te::TE_OK, ack)) return false;
  if (secret.empty()) return true;
  if (!read_frame(fd, &h, &body)) return false;
  ops->push_back(h.op);
  uint8_t epoch_le[8];
  put64(epoch_le, kTargetEpoch);
  const std::vector<uint8_t> want = hmac(secret, {{kClientLabel, std::strlen(kClientLabel)},
                                                  {nonce->data(), kNonceSize},
                                                  {server_nonce.data(), kNonceSize},
                                                  {epoch_le, 8},
                                                  {name.data(), name.size()}});
  if (h.op != OP_AUTH || body != want) return false;
  return answer(fd, h, te::TE_OK,
                hmac(secret, {{kServerLabel, std::strlen(kServerLabel)},
                              {server_nonce.data(), kNonceSize},
                              {nonce->data(), kNonceSize}}));
}

int32_t request_status(Node& n, uint64_t id, bool* unconfirmed) {
  tcp_test::Event e;
  if (!n.wait(tcp_test::Event::BATCH, id, &e)) return te::TE_TIMEOUT;
  auto b = n.t->take_batch(id);
  if (!b) return te::TE_INTERNAL;
  *unconfirmed = b->remote_unconfirmed.load();
  const int32_t cancelled = b->cancel_status.load();
  return cancelled != 0 ? cancelled : b->statuses[0].load();
}

// Batch `a` (its WRITE read by the target, never answered) is cancelled; batch `b` (sent
// behind it on the one lane) is not. The lane resets the connection after the grace time
// and connects again: the control frames come first, in the order queued, then `b` again.
void check_control_goes_first(const std::string& secret) {
  ScriptedTarget target;
  Options o = tcp_test::options("init", 0x2222, 1, 1);
  o.cancel_grace_ms = 300;
  o.secret.assign(secret.begin(), secret.end());
  Node init(o);
  std::vector<uint8_t> mem(8192);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = uint8_t(i * 7 + 3);
  const uint64_t m0 = reinterpret_cast<uint64_t>(mem.data());
  CHECK(init.t->registry().add(m0, mem.size(), false) == te::TE_OK);
  const uint64_t peer = init.t->open_peer("127.0.0.1", target.port(), kTargetEpoch, "target", false, 1);
  const int first = target.accept_one();
  std::vector<uint8_t> first_nonce, ops;
  CHECK(first >= 0 && handshake(first, secret, &first_nonce, &ops));
  tcp_test::Event e;
  CHECK(init.wait(tcp_test::Event::OPEN, 1, &e) && e.status == te::TE_OK);

  uint8_t op = 1;
  uint64_t len = 4096, remote_a = 0x10000, remote_b = 0x20000, local_b = m0 + 4096, a = 0, b = 0;
  std::string err;
  CHECK(init.t->submit(peer, &op, &m0, &remote_a, &len, 1, nullptr, 0, &a, &err) == te::TE_OK);
  CHECK(init.t->submit(peer, &op, &local_b, &remote_b, &len, 1, nullptr, 0, &b, &err) == te::TE_OK);
  Header h;
  std::vector<uint8_t> body;
  CHECK(read_frame(first, &h, &body) && h.op == OP_WRITE && h.addr == remote_a);
  CHECK(read_frame(first, &h, &body) && h.op == OP_WRITE && h.addr == remote_b);
  init.t->cancel(a, te::TE_TIMEOUT);

  const int second = target.accept_one();
  std::vector<uint8_t> second_nonce;
  ops.clear();
  CHECK(second >= 0 && handshake(second, secret, &second_nonce, &ops));
  CHECK(read_frame(second, &h, &body));
  ops.push_back(h.op);
  CHECK(h.op == OP_REVOKE && body == first_nonce);
  // Nothing follows the REVOKE until it is answered (100 ms of silence: a request sent
  // meanwhile would arrive well within it on loopback).
  pollfd quiet{second, POLLIN, 0};
  CHECK(::poll(&quiet, 1, 100) == 0);
  CHECK(answer(second, h, te::TE_OK));
  CHECK(read_frame(second, &h, &body));
  ops.push_back(h.op);
  CHECK(h.op == OP_WRITE && h.addr == remote_b && body == std::vector<uint8_t>(mem.begin() + 4096, mem.end()));
  CHECK(answer(second, h, te::TE_OK));
  std::vector<uint8_t> expected = {OP_HELLO};
  if (!secret.empty()) expected.push_back(OP_AUTH);
  expected.push_back(OP_REVOKE);
  expected.push_back(OP_WRITE);
  CHECK(ops == expected);

  // `a` settles with its cancel status, confirmed (REVOKE answered); `b` succeeded.
  bool unconfirmed = true;
  CHECK_EQ(request_status(init, a, &unconfirmed), te::TE_TIMEOUT);
  CHECK(!unconfirmed);
  CHECK_EQ(request_status(init, b, &unconfirmed), te::TE_OK);
  if (first >= 0) ::close(first);
  if (second >= 0) ::close(second);
}

}  // namespace

void test_revoke_goes_before_requests() { check_control_goes_first(""); }
void test_auth_and_revoke_go_before_requests() { check_control_goes_first("a shared secret"); }
