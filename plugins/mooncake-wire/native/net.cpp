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
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(fd, 512) != 0) {
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
    int ms = static_cast<int>(std::min<int64_t>(kSliceMs, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
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

Io SocketStream::wait(short events, Clock::time_point until) {
  for (;;) {
    if (stopped_ && stopped_()) return Io::STOPPED;
    auto now = Clock::now();
    if (now >= until) return Io::TIMEOUT;
    int ms = static_cast<int>(std::min<int64_t>(kSliceMs, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));
    pollfd p{fd_, events, 0};
    int rc = poll(&p, 1, ms);
    if (rc > 0) return Io::OK;  // readable/writable, or an error the next call reports
    if (rc < 0 && errno != EINTR) {
      error_ = errno_text("poll");
      return Io::LOST;
    }
  }
}

Io SocketStream::read_exact(void* p, size_t n, bool idle) {
  auto* b = static_cast<uint8_t*>(p);
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd_, b + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
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
    int limit = idle && got == 0 ? idle_ms_ : io_ms_;
    Io w = wait(POLLIN, std::min(deadline_, Clock::now() + std::chrono::milliseconds(limit)));
    if (w != Io::OK) return w;
  }
  return Io::OK;
}

Io SocketStream::write_all(const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  size_t put = 0;
  while (put < n) {
    ssize_t r = send(fd_, b + put, n - put, MSG_NOSIGNAL);
    if (r > 0) {
      put += static_cast<size_t>(r);
      sent_ += static_cast<uint64_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      error_ = errno_text("send");
      return Io::LOST;
    }
    Io w = wait(POLLOUT, std::min(deadline_, Clock::now() + std::chrono::milliseconds(io_ms_)));
    if (w != Io::OK) return w;
  }
  return Io::OK;
}

bool SocketStream::readable_now() const {
  uint8_t b;
  ssize_t r = recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return r > 0;
}

}  // namespace mcwire
