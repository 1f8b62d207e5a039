// libFuzzer target: the mooncake-tcp server side, end to end. One transport (real I/O
// loops and listener) serves a registered region at a fixed address with a fixed epoch;
// each input is sent over a fresh loopback connection as a client would (HELLO, AUTH,
// WRITE, WRITEV, READ, NOTIFY frames, or garbage), then the client half-closes and reads until the
// server closes. Crashes, sanitizer reports and hangs (libFuzzer's -timeout) are failures.
// TE_FUZZ_SECRET=1 in the environment runs the same against a transport with a secret.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "transport.h"

namespace {

constexpr uint64_t kEpoch = 0x1122334455667788ull;
constexpr uintptr_t kRegion = 0x4a0000000000ull;  // seeds address it (clear of the sanitizers' own ranges)
constexpr size_t kRegionSize = 1 << 20;

tetcp::Transport* server() {
  static tetcp::Transport* t = [] {
    void* mem = mmap(reinterpret_cast<void*>(kRegion), kRegionSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (mem != reinterpret_cast<void*>(kRegion)) {
      std::perror("mmap of the fuzz region");
      std::abort();
    }
    tetcp::Options o;
    o.segment_name = "fuzz-target";
    o.epoch = kEpoch;
    o.io_threads = 1;
    o.lanes = 1;
    o.handshake_timeout_ms = 200;
    o.idle_timeout_ms = 200;
    if (std::getenv("TE_FUZZ_SECRET")) o.secret = {'s', 'e', 'c', 'r', 'e', 't'};
    // Events would go to the JS thread; here they are dropped (the notification queue fills
    // up to its bound, and later NOTIFY frames are refused: that path is fuzzed too).
    auto* tr = new tetcp::Transport(o, [](tetcp::Event) {});
    std::string err;
    if (tr->start(&err) != te::TE_OK) {
      std::fprintf(stderr, "start: %s\n", err.c_str());
      std::abort();
    }
    tr->registry().add(kRegion, kRegionSize, true);
    return tr;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tetcp::Transport* t = server();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(t->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return 0;
  }
  // Send everything (bounded: a server that stops reading is fine, it is not a hang of ours).
  size_t sent = 0;
  while (sent < size) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 200) <= 0) break;
    ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  // Read answers until the server closes, or 300 ms pass (a half-complete frame waits for
  // the handshake/idle timeout, 200 ms here).
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 300) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
  }
  close(fd);
  return 0;
}
