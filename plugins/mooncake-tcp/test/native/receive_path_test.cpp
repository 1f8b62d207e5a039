// The receive path's pieces, over real sockets where they read: the HELLO body parser, the
// receive of a body's end with the next header, and the one reading of a recv() result both
// read loops share. Cases of tcp_core_test (scripts/native-test.sh).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"
#include "recv_buffer.h"
#include "te/memory_registry.h"
#include "transport.h"
#include "wire.h"

using namespace tetcp;

// The HELLO body parser takes any bytes: short bodies and names past the end are refused.
void test_parse_hello() {
  uint8_t b[64] = {};
  put64(b, 42);
  for (int i = 0; i < 16; ++i) b[8 + i] = uint8_t(i);
  put16(b + 24, 5);
  std::memcpy(b + 26, "alice", 5);
  HelloBody h;
  CHECK(parse_hello(b, 31, &h) && h.initiator_epoch == 42 && h.name_len == 5 && std::memcmp(h.name, "alice", 5) == 0);
  CHECK(h.nonce == b + 8);
  CHECK(parse_hello(b, 40, &h));   // trailing bytes are ignored
  CHECK(!parse_hello(b, 30, &h));  // name runs past the end
  CHECK(!parse_hello(b, 25, &h));  // shorter than the fixed part
  CHECK(!parse_hello(nullptr, 0, &h));
  put16(b + 24, 0xffff);
  CHECK(!parse_hello(b, sizeof b, &h));
  put16(b + 24, 0);
  CHECK(parse_hello(b, 26, &h) && h.name_len == 0);
}

// The last part of a large body and the next frame's header arrive in one recvmsg: the body
// bytes in place, the header (and nothing past it) in the receive buffer. A short receive
// says the socket is drained, so the read loop goes back to epoll without a recv on EAGAIN.
void test_body_end_brings_next_header() {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  te::MemoryRegistry registry;
  std::vector<uint8_t> dst(64 * 1024, 0);
  const uint64_t d0 = reinterpret_cast<uint64_t>(dst.data());
  CHECK(registry.add(d0, dst.size(), true) == te::TE_OK);
  std::vector<uint8_t> body(20000), header(kHeaderSize), after(100, 0x5a);
  for (size_t i = 0; i < body.size(); ++i) body[i] = uint8_t(i * 13 + 1);
  for (size_t i = 0; i < header.size(); ++i) header[i] = uint8_t(0xa0 + i);
  CHECK(::send(sv[1], body.data(), body.size(), 0) == ssize_t(body.size()));
  CHECK(::send(sv[1], header.data(), header.size(), 0) == ssize_t(header.size()));
  CHECK(::send(sv[1], after.data(), after.size(), 0) == ssize_t(after.size()));

  RecvBuffer rbuf;
  bool unregistered = true;
  uint64_t asked = 0;
  ssize_t r = recv_body_end(sv[0], registry, true, d0, body.size(), rbuf, 4096, kHeaderSize, &unregistered, &asked);
  CHECK(!unregistered);
  CHECK(r == ssize_t(body.size() + kHeaderSize));
  CHECK(asked == body.size() + kHeaderSize);
  CHECK(!drained(r, asked));
  CHECK(std::memcmp(dst.data(), body.data(), body.size()) == 0);
  CHECK(dst[body.size()] == 0);  // nothing past the body lands in place
  CHECK(rbuf.size() == kHeaderSize && std::memcmp(rbuf.data(), header.data(), kHeaderSize) == 0);
  rbuf.consume(kHeaderSize);

  // Only a body's end is there: all of it lands, nothing is buffered, the socket is drained.
  char rest[128];
  CHECK(::recv(sv[0], rest, sizeof rest, 0) == ssize_t(after.size()));
  CHECK(::send(sv[1], body.data(), 1000, 0) == 1000);
  r = recv_body_end(sv[0], registry, true, d0 + 30000, 1000, rbuf, 4096, kHeaderSize, &unregistered, &asked);
  CHECK(r == 1000 && rbuf.empty() && drained(r, asked));
  CHECK(std::memcmp(dst.data() + 30000, body.data(), 1000) == 0);

  // Unregistered destination: nothing is received (the caller drains the body instead).
  CHECK(::send(sv[1], body.data(), 1000, 0) == 1000);
  r = recv_body_end(sv[0], registry, true, d0 + dst.size(), 1000, rbuf, 4096, kHeaderSize, &unregistered, &asked);
  CHECK(unregistered && r == 0 && rbuf.empty());
  ::close(sv[0]);
  ::close(sv[1]);
}

// after_recv, the one reading of a recv() result both read loops share, over a real socket:
// bytes are processed, an empty socket stops the loop without failing the connection, the
// peer's close and a receive error are each reported once (0, or the errno) and stop it.
void test_after_recv_reads_each_result() {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
  std::vector<int> lost;
  auto report = [&](int err) { lost.push_back(err); };
  char b[16];
  CHECK(after_recv(::recv(sv[0], b, sizeof b, 0), report) == RecvNext::STOP);  // EAGAIN
  CHECK(lost.empty());
  CHECK(::send(sv[1], "abc", 3, 0) == 3);
  ssize_t r = ::recv(sv[0], b, sizeof b, 0);
  CHECK(r == 3 && after_recv(r, report) == RecvNext::PROCESS);
  CHECK(lost.empty());
  ::close(sv[1]);
  CHECK(after_recv(::recv(sv[0], b, sizeof b, 0), report) == RecvNext::STOP);  // end of stream
  CHECK(lost.size() == 1 && lost[0] == 0);
  ::close(sv[0]);
  CHECK(after_recv(::recv(sv[0], b, sizeof b, 0), report) == RecvNext::STOP);  // a closed descriptor
  CHECK(lost.size() == 2 && lost[1] == EBADF);
  errno = EINTR;
  CHECK(after_recv(-1, report) == RecvNext::RETRY);
  CHECK(lost.size() == 2);
}

namespace {
// A connected TCP pair over loopback (the receive mark is TCP's: SO_RCVLOWAT as poll reports it).
void tcp_pair(int* client, int* server) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(l, 1) == 0);
  socklen_t len = sizeof a;
  CHECK(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  *client = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(connect(*client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  *server = accept(l, nullptr, nullptr);
  CHECK(*server >= 0);
  ::close(l);
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

void send_all(int fd, size_t n) {
  std::vector<uint8_t> b(n, 0x42);
  size_t off = 0;
  while (off < n) {
    ssize_t w = ::send(fd, b.data() + off, n - off, 0);
    CHECK(w > 0);
    off += static_cast<size_t>(w);
  }
}
}  // namespace

// The receive mark: none for small bodies, the rest of a body up to kLowatMax; the socket
// then reports input only once that much is queued, and a close at once whatever the mark.
void test_receive_mark() {
  CHECK(lowat_for(0) == 1 && lowat_for(kLowatMin - 1) == 1);
  CHECK(lowat_for(kLowatMin) == int(kLowatMin) && lowat_for(100000) == 100000);
  CHECK(lowat_for(kLowatMax + 1) == int(kLowatMax) && lowat_for(uint64_t(1) << 40) == int(kLowatMax));
  // A fixed receive buffer (socketBufferBytes) keeps the mark under a quarter of it, or none.
  CHECK(lowat_for(kLowatMax, 512 * 1024) == 128 * 1024 && lowat_for(kLowatMax, 128 * 1024) == 1);

  int c = -1, s = -1;
  tcp_pair(&c, &s);
  int mark = 1;
  set_lowat(s, 100000, &mark);
  CHECK(mark == 100000);
  int got = 0;
  socklen_t len = sizeof got;
  CHECK(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &got, &len) == 0 && got == 100000);
  send_all(c, 60000);
  CHECK(!readable(s, 100));  // under the mark: not reported (it would be at once)
  send_all(c, 40000);
  CHECK(readable(s, 10000));  // the mark reached
  std::vector<uint8_t> b(200000);
  size_t in = 0;
  while (in < 100000) {
    ssize_t r = ::recv(s, b.data() + in, b.size() - in, 0);
    CHECK(r > 0);
    in += static_cast<size_t>(r);
  }
  CHECK(in == 100000);
  // Back to 1: one byte is reported.
  set_lowat(s, 1, &mark);
  CHECK(mark == 1);
  send_all(c, 1);
  CHECK(readable(s, 10000));
  CHECK(::recv(s, b.data(), 1, 0) == 1);
  // A peer that closes with less than the mark queued is reported at once.
  set_lowat(s, 200000, &mark);
  send_all(c, 1000);
  ::close(c);
  CHECK(readable(s, 10000));
  CHECK(::recv(s, b.data(), b.size(), 0) == 1000);
  CHECK(::recv(s, b.data(), b.size(), 0) == 0);
  ::close(s);
}

// congestionControl: tune_socket gives a socket the algorithm asked for (reno is always built
// in), and a name the kernel does not have is refused with its reason.
void test_congestion_control() {
  int c = -1, s = -1;
  tcp_pair(&c, &s);
  Options o;
  o.congestion = "reno";
  tune_socket(c, o);
  char name[16] = {};
  socklen_t len = sizeof name;
  CHECK(getsockopt(c, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0 && std::strcmp(name, "reno") == 0);
  std::string why;
  CHECK(!set_congestion(s, "nosuchcc", &why) && !why.empty());
  ::close(c);
  ::close(s);
}
