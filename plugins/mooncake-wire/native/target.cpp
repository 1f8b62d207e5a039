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
  if (sa.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&sa)->sin6_addr, b, sizeof b);
  else
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&sa)->sin_addr, b, sizeof b);
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
  return active_;
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
    auto it = per_ip_.find(ip);
    uint32_t from_ip = it == per_ip_.end() ? 0 : it->second;
    if (stopping_.load() || active_ >= o_.max_connections || from_ip >= o_.max_per_address) {
      counters_.refused_connections++;
      close(fd);
      continue;
    }
    set_nonblocking_nodelay(fd);
    counters_.connections++;
    per_ip_[ip]++;
    active_++;
    queue_.push_back({fd, std::move(ip)});
    // Every queued connection needs a waiting thread of its own (a pooled connection holds
    // its thread until it closes); a thread starts only when none is left to wake.
    if (queue_.size() > idle_)
      sessions_.emplace_back([this] { session_loop(); });
    else
      cv_.notify_one();
  }
}

void Target::session_loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    idle_++;
    cv_.wait(l, [this] { return stopping_.load() || !queue_.empty(); });
    idle_--;
    if (queue_.empty()) return;  // stopping
    Accepted a = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    // 100 ms slices: an idle connection costs ten wakeups a second, a stop waits at most that.
    SocketStream s(
        a.fd, o_.idle_ms, o_.io_ms, [this] { return stopping_.load(std::memory_order_relaxed); },
        Clock::time_point::max(), 100);
    serve_session(s, registry_, counters_);
    // Closed by its only user, so the descriptor number cannot be reused under another thread.
    close(a.fd);
    l.lock();
    active_--;
    if (--per_ip_[a.ip] == 0) per_ip_.erase(a.ip);
  }
}

void Target::stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    cv_.notify_all();
  }
  // The accept thread is gone, so sessions_ no longer grows; every session sees the stop
  // flag within one slice (100 ms).
  for (auto& t : sessions_) t.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& a : queue_) close(a.fd);
  queue_.clear();
}

}  // namespace mcwire
