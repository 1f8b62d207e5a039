#include "fd_server.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "allocator.h"
#include "te/clock.h"
#include "te/descriptors.h"
#include "te/epoch.h"

namespace tenvl {

using te::cuda::Error;

namespace {

constexpr uint32_t kMagic = 0x564e4554;  // "TENV"
constexpr uint32_t kVersion = 1;

struct Request {
  uint32_t magic, version;
  uint64_t id;
};
struct Reply {
  uint32_t magic;
  int32_t status;
  uint64_t size;
};

// One started server. Each has its own stop flag and listener: the last user's release stops
// the one it took out, while a transport that acquires meanwhile starts a new one, whose start
// must not tell the old one to go on.
struct Server {
  int listen_fd = -1;
  std::string name;
  std::atomic<bool> stopping{false};
  std::thread thread;
};

std::mutex server_mu;
int users = 0;
std::unique_ptr<Server> current;  // the running server; null while no transport uses one

/**
 * Only processes of this user (or root) may import this process's GPU memory: the abstract
 * socket's name is not a secret (it travels in descriptors), so the kernel's record of who
 * connected decides.
 */
bool peer_allowed(int c) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == getuid() || cred.uid == 0;
}

constexpr int kRequestTimeoutMs = 2000;  // a connection's whole request must come within this
constexpr size_t kMaxClients = 64;       // connections read at once; more wait in the backlog

// Sends the reply (with the allocation's fd when there is one) and closes the connection.
// The reply is 16 bytes on a fresh socket, so a non-blocking send does not fall short.
void answer(int c, int32_t status, int fd, uint64_t size) {
  Reply rep{kMagic, status, size};
  iovec iov{&rep, sizeof rep};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  sendmsg(c, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (fd >= 0) ::close(fd);
  ::close(c);
}

// One connection whose request is being read.
struct Client {
  int fd;
  int64_t deadline_ms;
  size_t got = 0;
  Request req{};
};

// Answers a complete request, or a connection that ended or ran out of time before it.
void finish(const Client& k) {
  if (k.got != sizeof k.req || k.req.magic != kMagic || k.req.version != kVersion) {
    answer(k.fd, te::TE_PROTOCOL_MISMATCH, -1, 0);
    return;
  }
  uint64_t size = 0;
  const int fd = exported_fd(k.req.id, &size);
  answer(k.fd, fd < 0 ? te::TE_MEMORY_NOT_REGISTERED : te::TE_OK, fd, size);
}

// Reads what has arrived of a client's request; true when the client is finished with
// (answered and closed).
bool read_request(Client& k) {
  char* into = reinterpret_cast<char*>(&k.req);
  for (;;) {
    ssize_t n = recv(k.fd, into + k.got, sizeof k.req - k.got, MSG_DONTWAIT);
    if (n > 0) {
      k.got += static_cast<size_t>(n);
      if (k.got < sizeof k.req) continue;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;  // the rest has not arrived yet
    }
    finish(k);  // complete, or the peer closed or failed before completing it
    return true;
  }
}

// Takes up the connections waiting on the listener, as many as there is room for. Another
// user's connection is answered at once, before anything is read from it. False when out of
// descriptors (the rest stay in the backlog).
bool accept_waiting(int lfd, std::vector<Client>& clients) {
  while (clients.size() < kMaxClients) {
    int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return !te::accept_starved(errno);
    }
    if (!peer_allowed(c)) {
      answer(c, te::TE_AUTH_FAILED, -1, 0);
      continue;
    }
    clients.push_back(Client{c, te::now_ms() + kRequestTimeoutMs});
  }
  return true;
}

// Serves every connection at once, each with its own deadline: a client that connects and
// stays silent holds only its own place, not the imports of every other process.
void run(Server* server) {
  const int lfd = server->listen_fd;
  std::vector<Client> clients;
  std::vector<pollfd> fds;
  int64_t listen_paused_until = 0;
  while (!server->stopping.load()) {
    const int64_t now = te::now_ms();
    // Clients past their deadline are answered (their request never came whole).
    for (size_t i = 0; i < clients.size();) {
      if (clients[i].deadline_ms <= now) {
        finish(clients[i]);
        clients[i] = clients.back();
        clients.pop_back();
      } else {
        ++i;
      }
    }
    fds.clear();
    // The listener is left out while every place is taken, and for kDescriptorRetryMs after
    // the process ran out of descriptors: the connection stays in the backlog, and poll would
    // report it again at once.
    const bool listening = clients.size() < kMaxClients && now >= listen_paused_until;
    if (listening) fds.push_back(pollfd{lfd, POLLIN, 0});
    int timeout = 200;
    for (const Client& k : clients) {
      fds.push_back(pollfd{k.fd, POLLIN, 0});
      timeout = static_cast<int>(std::min<int64_t>(timeout, std::max<int64_t>(0, k.deadline_ms - now)));
    }
    if (!listening && now < listen_paused_until)
      timeout = static_cast<int>(std::min<int64_t>(timeout, listen_paused_until - now));
    if (poll(fds.data(), fds.size(), timeout) <= 0) continue;
    const size_t first = listening ? 1 : 0;
    // Clients first (their indices match fds from `first`), then new connections.
    for (size_t i = fds.size(); i-- > first;) {
      if (fds[i].revents == 0) continue;
      const size_t k = i - first;
      if (read_request(clients[k])) {
        clients[k] = clients.back();
        clients.pop_back();
      }
    }
    if (listening && fds[0].revents != 0 && !accept_waiting(lfd, clients))
      listen_paused_until = te::now_ms() + te::kDescriptorRetryMs;
  }
  for (const Client& k : clients) ::close(k.fd);
}

}  // namespace

socklen_t fd_socket_address(const std::string& name, sockaddr_un* a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  // Abstract namespace: sun_path[0] = 0, no file to clean up.
  size_t n = std::min(name.size(), sizeof(a->sun_path) - 2);
  memcpy(a->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

Error fd_server_acquire(std::string* name) {
  std::lock_guard<std::mutex> lock(server_mu);
  if (users > 0) {
    ++users;
    *name = current->name;
    return Error::none();
  }
  uint64_t rnd = 0;
  te::random_bytes(&rnd, sizeof rnd);
  char buf[96];
  snprintf(buf, sizeof buf, "te-nvlink-%d-%016llx", static_cast<int>(getpid()), static_cast<unsigned long long>(rnd));
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);  // accept_waiting takes until EAGAIN
  if (lfd < 0) return Error::make(te::TE_INTERNAL, std::string("socket(AF_UNIX) failed: ") + strerror(errno));
  sockaddr_un a;
  socklen_t len = fd_socket_address(buf, &a);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(lfd, 64) != 0) {
    int err = errno;
    ::close(lfd);
    return Error::make(te::TE_INTERNAL, std::string("cannot listen on the unix socket @") + buf + ": " + strerror(err));
  }
  auto server = std::make_unique<Server>();
  server->listen_fd = lfd;
  server->name = buf;
  server->thread = std::thread(run, server.get());
  current = std::move(server);
  users = 1;
  *name = current->name;
  return Error::none();
}

void fd_server_release() {
  std::unique_ptr<Server> stopped;
  {
    std::lock_guard<std::mutex> lock(server_mu);
    if (users == 0 || --users > 0) return;
    stopped = std::move(current);
  }
  // Outside the lock: the server may take up to its poll timeout to see the flag, and an
  // acquire meanwhile starts a server of its own.
  stopped->stopping = true;
  if (stopped->thread.joinable()) stopped->thread.join();
  ::close(stopped->listen_fd);
}

std::string fd_server_name() {
  std::lock_guard<std::mutex> lock(server_mu);
  return users > 0 ? current->name : std::string();
}

Error fetch_fd(const std::string& name, uint64_t id, int timeout_ms, int* fd_out, uint64_t* size_out) {
  if (name.empty())
    return Error::make(te::TE_PEER_UNREACHABLE, "the peer publishes no fd socket (is it using handleType 'posix-fd'?)");
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Error::make(te::TE_INTERNAL, std::string("socket(AF_UNIX) failed: ") + strerror(errno));
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_un a;
  socklen_t len = fd_socket_address(name, &a);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    int err = errno;
    ::close(s);
    return Error::make(te::TE_PEER_UNREACHABLE, "cannot reach the fd socket @" + name +
                                                    " of the peer: " + strerror(err) +
                                                    " (is it alive, on this machine and in this network namespace?)");
  }
  Request req{kMagic, kVersion, id};
  if (send(s, &req, sizeof req, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof req)) {
    int err = errno;
    // The server answers a refused process without reading its request and closes: the
    // refusal may be waiting to be read although the send failed.
    if (err != EPIPE && err != ECONNRESET) {
      ::close(s);
      return Error::make(te::TE_CONNECTION_LOST, std::string("sending the fd request failed: ") + strerror(err));
    }
  }
  Reply rep{};
  iovec iov{&rep, sizeof rep};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got = recvmsg(s, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  int err = errno;
  ::close(s);
  int fd = -1;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(cm), sizeof fd);
  }
  if (got != static_cast<ssize_t>(sizeof rep) || rep.magic != kMagic) {
    if (fd >= 0) ::close(fd);
    return Error::make(te::TE_CONNECTION_LOST, std::string("no valid reply from the fd socket @") + name +
                                                   (got < 0 ? std::string(": ") + strerror(err) : ""));
  }
  if (rep.status == te::TE_AUTH_FAILED) {
    if (fd >= 0) ::close(fd);
    return Error::make(
        rep.status,
        "the fd socket @" + name + " refused this process: only processes of the same user may import its GPU memory");
  }
  if (rep.status != te::TE_OK || fd < 0) {
    if (fd >= 0) ::close(fd);
    return Error::make(rep.status != te::TE_OK ? rep.status : te::TE_INTERNAL,
                       "the peer does not export allocation " + std::to_string(id) +
                           " (unregistered or freed since its descriptor was published)");
  }
  *fd_out = fd;
  *size_out = rep.size;
  return Error::none();
}

}  // namespace tenvl
