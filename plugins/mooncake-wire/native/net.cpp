#include "net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mcwire {

namespace {

constexpr int kSliceMs = 20;

bool resolve_literal(const std::string& host, uint16_t port, sockaddr_storage* out, socklen_t* len, std::string* err) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string p = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0 || !res) {
    *err = "not an IP address: " + host;
    return false;
  }
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

void set_nonblocking_nodelay(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int listen_on(const std::string& host, uint16_t port, std::string* err) {
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (!resolve_literal(host, port, &sa, &len, err)) return -1;
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno_text("socket");
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Mooncake initiators may open one connection per request (thousands a second): a full
  // accept queue drops the handshake's last ACK, and the request then waits for a SYN-ACK
  // retransmission (1, 3, 7 s). The kernel caps the backlog at net.core.somaxconn.
  constexpr int kBacklog = 4096;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(fd, kBacklog) != 0) {
    *err = errno_text(("cannot listen on " + host + ":" + std::to_string(port)).c_str());
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  if (sa.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
}

int connect_to(const std::string& host, uint16_t port, Clock::time_point deadline, const std::function<bool()>& stopped,
               std::string* err) {
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (!resolve_literal(host, port, &sa, &len, err)) return -1;
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = errno_text("socket");
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) return fd;
  if (errno != EINPROGRESS) {
    *err = errno_text(("connect to " + host + ":" + std::to_string(port)).c_str());
    close(fd);
    return -1;
  }
  for (;;) {
    if (stopped && stopped()) {
      *err = "stopped while connecting";
      close(fd);
      return -1;
    }
    auto now = Clock::now();
    if (now >= deadline) {
      *err = "connect to " + host + ":" + std::to_string(port) + " timed out";
      close(fd);
      return -1;
    }
    int ms = static_cast<int>(
        std::min<int64_t>(kSliceMs, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    pollfd p{fd, POLLOUT, 0};
    int rc = poll(&p, 1, ms);
    if (rc > 0) {
      int e = 0;
      socklen_t el = sizeof e;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
      if (e == 0) return fd;
      *err = "connect to " + host + ":" + std::to_string(port) + ": " + std::strerror(e);
      close(fd);
      return -1;
    }
  }
}

SocketStream::SocketStream(int fd, int idle_ms, int io_ms, std::function<bool()> stopped, Clock::time_point deadline,
                           int slice_ms)
    : fd_(fd), idle_ms_(idle_ms), io_ms_(io_ms), stopped_(std::move(stopped)), deadline_(deadline) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{slice_ms / 1000, (slice_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

Io SocketStream::check(Clock::time_point last_progress, int limit_ms) {
  if (stopped_ && stopped_()) return Io::STOPPED;
  auto now = Clock::now();
  if (now >= deadline_ || now - last_progress >= std::chrono::milliseconds(limit_ms)) return Io::TIMEOUT;
  return Io::OK;
}

Io SocketStream::read_exact(void* p, size_t n, bool idle) {
  auto* b = static_cast<uint8_t*>(p);
  size_t got = 0;
  auto last = Clock::now();
  while (got < n) {
    ssize_t r = recv(fd_, b + got, n - got, MSG_WAITALL);
    if (r > 0) {
      got += static_cast<size_t>(r);
      last = Clock::now();
      continue;
    }
    if (r == 0) {
      if (idle && got == 0) return Io::CLOSED;
      error_ = "the peer closed the connection in the middle of a message";
      return Io::LOST;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      error_ = errno_text("recv");
      return Io::LOST;
    }
    Io c = check(last, idle && got == 0 ? idle_ms_ : io_ms_);
    if (c != Io::OK) return c;
  }
  return Io::OK;
}

Io SocketStream::write_all(const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  size_t put = 0;
  auto last = Clock::now();
  while (put < n) {
    ssize_t r = send(fd_, b + put, n - put, MSG_NOSIGNAL);
    if (r > 0) {
      put += static_cast<size_t>(r);
      sent_ += static_cast<uint64_t>(r);
      last = Clock::now();
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      error_ = errno_text("send");
      return Io::LOST;
    }
    Io c = check(last, io_ms_);
    if (c != Io::OK) return c;
  }
  return Io::OK;
}

bool SocketStream::readable_now() const {
  uint8_t b;
  ssize_t r = recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return r > 0;
}

}  // namespace mcwire
