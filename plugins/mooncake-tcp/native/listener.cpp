// The data listener (see listener.h).
#include "listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "te/descriptors.h"
#include "transport.h"

namespace tetcp {

namespace {
/** The IP address of an accepted peer as a map key (raw bytes; the port is left out). */
std::string address_key(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(sa).sin_addr;
    return std::string(reinterpret_cast<const char*>(&a), sizeof a);
  }
  if (sa.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr;
    return std::string(reinterpret_cast<const char*>(&a), sizeof a);
  }
  return std::string();
}

// Accepts connections. When the process is out of descriptors (EMFILE/ENFILE) a pending
// connection cannot be accepted, stays in the backlog and keeps the listener readable:
// retrying at once would spin. One descriptor is held in reserve for that case: it is
// freed to accept and at once close the waiting connections (their initiators see the
// close instead of a connect timeout), then taken again. If it cannot be taken again, the
// listener pauses for a while. Each episode is logged once.
class Listener : public IoHandler {
 public:
  Listener(Transport* t, Loop* loop, int fd, int reserve) : t_(t), loop_(loop), fd_(fd), reserve_(reserve) {
    loop_->add(fd_, EPOLLIN, this);
  }
  void on_event(uint32_t) override {
    for (;;) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      int c = accept4(fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c >= 0) {
        exhausted_ = false;
        t_->accept_fd(c, address_key(sa));
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (te::accept_starved(errno)) shed(errno);
      return;  // EAGAIN, or out of descriptors or memory (handled above)
    }
  }
  void on_tick(int64_t now) override {
    if (paused_until_ != 0 && now >= paused_until_) {
      paused_until_ = 0;
      if (reserve_ < 0) reserve_ = open_descriptor_reserve();
      loop_->modify(fd_, EPOLLIN, this);
    }
  }
  void on_shutdown() override {
    closed = true;
    loop_->remove(fd_, this);
    ::close(fd_);
    if (reserve_ >= 0) ::close(reserve_);
    loop_->retire(this, true);
  }

 private:
  // Closes the connections waiting in the backlog, accepting each with the reserve
  // descriptor; when that cannot go on (no reserve, or the accept fails for want of kernel
  // memory), stops listening for kDescriptorRetryMs instead of being woken for them again.
  void shed(int err) {
    if (!exhausted_) {
      exhausted_ = true;
      t_->warn(std::string("out of file descriptors (") + strerror(err) +
               "): new data connections are closed until descriptors are freed; raise the limit (ulimit -n) or "
               "lower maxConnections");
    }
    while (reserve_ >= 0) {
      ::close(reserve_);
      reserve_ = -1;
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      const int accept_err = errno;
      if (c >= 0) ::close(c);
      reserve_ = open_descriptor_reserve();
      if (c >= 0 || accept_err == EINTR || accept_err == ECONNABORTED) continue;
      if (accept_err == EAGAIN || accept_err == EWOULDBLOCK) return;  // the backlog is drained
      break;  // still nothing to accept with (the descriptor went elsewhere, or no memory)
    }
    // No reserve (another thread took the descriptor) or no memory: stop listening a while.
    loop_->modify(fd_, 0, this);
    paused_until_ = now_ms() + te::kDescriptorRetryMs;
  }

  Transport* t_;
  Loop* loop_;
  int fd_;
  int reserve_ = -1;
  bool exhausted_ = false;
  int64_t paused_until_ = 0;
};
}  // namespace

int open_descriptor_reserve() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

IoHandler* start_listener(Transport* t, Loop* loop, int fd, int reserve) { return new Listener(t, loop, fd, reserve); }

}  // namespace tetcp
