// The data listener a Mooncake initiator connects to: one accept thread and a pool of
// session threads, each serving one connection at a time (a Mooncake initiator keeps one
// request outstanding per connection, and by default opens a connection per request: the
// pool keeps that churn from costing a thread start per request). Bounded: at most
// max_connections are served at once (max_per_address from one IP); a connection beyond
// either waits, accepted but unread and without a thread, and is served oldest first when
// a place frees. A Mooncake initiator without connection pooling counts a legacy WRITE done
// once it is in its socket and opens the next connection at once, so a burst of hundreds of
// connections from one address is ordinary when this process is slower than the initiator:
// refusing them failed the initiator's transfers. Only past max_waiting waiting connections
// is one closed at accept. A connection idle longer than idle_ms, or stalled in the middle of
// a request longer than io_ms, is closed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "session.h"
#include "te/memory_registry.h"

namespace mcwire {

struct TargetOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;
  uint32_t max_connections = 1024;
  uint32_t max_per_address = 256;
  uint32_t max_waiting = 4096;
  int idle_ms = 300000;
  int io_ms = 30000;
};

class Target {
 public:
  Target(const TargetOptions& o, const te::MemoryRegistry& registry) : o_(o), registry_(registry) {}
  ~Target() { stop(); }
  /** Binds and starts accepting; false and `*err` when the port cannot be bound. */
  bool start(std::string* err);
  uint16_t port() const { return port_; }
  /** Closes the listener and every connection, and joins their threads. Idempotent. */
  void stop();
  TargetCounters& counters() { return counters_; }
  /** Connections being served, queued for a session thread or waiting for a place. */
  uint32_t open_connections();

 private:
  struct Accepted {
    int fd;
    std::string ip;
  };
  void accept_loop();
  void session_loop();
  /** Whether a connection from `ip` may be served now (under both bounds). Holds mu_. */
  bool has_place(const std::string& ip) const;
  /** Queues `a` for a session thread; `spawn`: start a thread when none is idle. Holds mu_. */
  void admit(Accepted a, bool spawn);
  TargetOptions o_;
  const te::MemoryRegistry& registry_;
  TargetCounters counters_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Accepted> queue_;
  std::deque<Accepted> waiting_;  // over a bound: accepted, nothing read, served oldest first
  std::vector<std::thread> sessions_;
  uint32_t idle_ = 0;                       // session threads waiting for a connection
  uint32_t active_ = 0;                     // connections queued or being served
  std::map<std::string, uint32_t> per_ip_;  // the same, by peer address
};

}  // namespace mcwire
