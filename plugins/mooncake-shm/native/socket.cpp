// Unix-socket helpers (see socket.h).
#include "socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>

namespace teshm {
namespace {

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

socklen_t abstract_address(const std::string& name, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = name.size() < sizeof(a->sun_path) - 1 ? name.size() : sizeof(a->sun_path) - 1;
  std::memcpy(a->sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

te::Status listen_abstract(const std::string& name, int backlog, int* fd, std::string* err) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *err = sys_error("socket(AF_UNIX, SOCK_SEQPACKET)");
    return te::TE_INTERNAL;
  }
  sockaddr_un a;
  socklen_t len = abstract_address(name, &a);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(s, backlog) != 0) {
    *err = sys_error("binding the abstract socket @" + name);
    close(s);
    return te::TE_INTERNAL;
  }
  *fd = s;
  return te::TE_OK;
}

te::Status connect_abstract(const std::string& name, int timeout_ms, int* fd, std::string* err) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *err = sys_error("socket(AF_UNIX, SOCK_SEQPACKET)");
    return te::TE_INTERNAL;
  }
  sockaddr_un a;
  socklen_t len = abstract_address(name, &a);
  // A unix connect never waits for the peer, except when the listener's backlog is full:
  // then it fails with EAGAIN and is retried until the deadline.
  int64_t deadline = now_ms() + timeout_ms;
  while (connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN && now_ms() < deadline) {
      usleep(1000);
      continue;
    }
    *err =
        errno == EAGAIN
            ? "connecting to @" + name + " timed out (its backlog stayed full)"
            : sys_error("connecting to @" + name + " (is the peer alive, on this host and in this network namespace?)");
    close(s);
    return te::TE_PEER_UNREACHABLE;
  }
  *fd = s;
  return te::TE_OK;
}

bool peer_cred(int fd, PeerCred* out) {
  ucred c;
  socklen_t len = sizeof c;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) return false;
  out->pid = c.pid;
  out->uid = c.uid;
  out->gid = c.gid;
  return true;
}

ssize_t send_message(int fd, const std::vector<uint8_t>& msg, int pass_fd) {
  iovec iov{const_cast<uint8_t*>(msg.data()), msg.size()};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof control);
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  ssize_t r;
  do r = sendmsg(fd, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  return r;
}

ssize_t recv_message(int fd, std::vector<uint8_t>* buf, int* got_fd, bool* truncated) {
  // Received into scratch and copied out: sizing `buf` to 64 KiB per call zero-filled it each
  // time, which cost more than the message (a few hundred bytes) on every completion.
  thread_local uint8_t scratch[65536 + 1];
  iovec iov{scratch, sizeof scratch};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  // Room for a few descriptors: a hostile peer may attach several; all but the first are closed.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  h.msg_control = control;
  h.msg_controllen = sizeof control;
  ssize_t r;
  do r = recvmsg(fd, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  *got_fd = -1;
  *truncated = r > 0 && ((h.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(r) > 65536);
  if (r >= 0) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
        if (*got_fd < 0)
          *got_fd = f;
        else
          close(f);
      }
    }
    if ((h.msg_flags & MSG_CTRUNC) != 0 && *got_fd >= 0) {
      close(*got_fd);
      *got_fd = -1;
      *truncated = true;
    }
    buf->assign(scratch, scratch + (r > 0 ? std::min<size_t>(static_cast<size_t>(r), sizeof scratch) : 0));
  }
  return r;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

bool pidfd_exited(int pidfd) {
  if (pidfd < 0) return false;
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

}  // namespace teshm
