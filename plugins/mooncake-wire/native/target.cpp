#include "target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"

namespace mcwire {

namespace {

std::string peer_ip(const sockaddr_storage& sa) {
  char b[INET6_ADDRSTRLEN] = {0};
  if (sa.ss_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&sa)->sin6_addr, b, sizeof b);
  else inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&sa)->sin_addr, b, sizeof b);
  return b;
}

}  // namespace

bool Target::start(std::string* err) {
  listen_fd_ = listen_on(o_.bind_address, o_.port, err);
  if (listen_fd_ < 0) return false;
  port_ = local_port(listen_fd_);
  acceptor_ = std::thread([this] { accept_loop(); });
  return true;
}

uint32_t Target::open_connections() {
  std::lock_guard<std::mutex> l(mu_);
  reap_locked();
  return static_cast<uint32_t>(conns_.size());
}

void Target::reap_locked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done.load()) {
      it->thread.join();
      if (--per_ip_[it->ip] == 0) per_ip_.erase(it->ip);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void Target::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string ip = peer_ip(sa);
    std::lock_guard<std::mutex> l(mu_);
    reap_locked();
    if (stopping_.load() || conns_.size() >= o_.max_connections || per_ip_[ip] >= o_.max_per_address) {
      if (per_ip_[ip] == 0) per_ip_.erase(ip);
      counters_.refused_connections++;
      close(fd);
      continue;
    }
    set_nonblocking_nodelay(fd);
    counters_.connections++;
    per_ip_[ip]++;
    conns_.emplace_back();
    Conn& c = conns_.back();
    c.fd = fd;
    c.ip = ip;
    c.thread = std::thread([this, &c] {
      SocketStream s(c.fd, o_.idle_ms, o_.io_ms, [this] { return stopping_.load(std::memory_order_relaxed); });
      serve_session(s, registry_, counters_);
      // Closed here, by its only user: the fd number cannot be reused under another thread.
      close(c.fd);
      c.done.store(true);
    });
  }
}

void Target::stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  std::list<Conn> conns;
  {
    std::lock_guard<std::mutex> l(mu_);
    conns.swap(conns_);
  }
  // Every session polls the stop flag at least every 20 ms.
  for (auto& c : conns) c.thread.join();
}

}  // namespace mcwire
