#include "target.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"
#include "te/descriptors.h"

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
  return active_ + static_cast<uint32_t>(waiting_.size());
}

bool Target::has_place(const std::string& ip) const {
  if (active_ >= o_.max_connections) return false;
  auto it = per_ip_.find(ip);
  return it == per_ip_.end() || it->second < o_.max_per_address;
}

void Target::admit(Accepted a, bool spawn) {
  set_nonblocking_nodelay(a.fd);
  counters_.connections++;
  per_ip_[a.ip]++;
  active_++;
  queue_.push_back(std::move(a));
  // Every queued connection needs a waiting thread of its own (a pooled connection holds
  // its thread until it closes); a thread starts only when none is left to wake.
  if (spawn && queue_.size() > idle_)
    sessions_.emplace_back([this] { session_loop(); });
  else
    cv_.notify_one();
}

void Target::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or kernel memory: the connection stays in the backlog, and poll
      // would report it again at once; wait instead of spinning on it.
      if (te::accept_starved(errno)) poll(nullptr, 0, te::kDescriptorRetryMs);
      continue;
    }
    Accepted a{fd, peer_ip(sa)};
    std::lock_guard<std::mutex> l(mu_);
    if (!stopping_.load() && has_place(a.ip)) {
      admit(std::move(a), true);
    } else if (!stopping_.load() && waiting_.size() < o_.max_waiting) {
      counters_.waited_connections++;
      waiting_.push_back(std::move(a));
    } else {
      counters_.refused_connections++;
      close(fd);
    }
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
    // The place this connection held goes to the oldest waiting one that may take it. No
    // thread is started here (sessions_ grows on the accept thread only, which stop() joins
    // first): this thread is about to wait for the queue, so one is always there to take it.
    if (stopping_.load()) continue;
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (!has_place(it->ip)) continue;
      Accepted w = std::move(*it);
      waiting_.erase(it);
      admit(std::move(w), false);
      break;
    }
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
  for (auto& a : waiting_) close(a.fd);
  waiting_.clear();
}

}  // namespace mcwire
