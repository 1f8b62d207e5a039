// The data listener a Mooncake initiator connects to: one accept thread and a pool of
// session threads, each serving one connection at a time (a Mooncake initiator keeps one
// request outstanding per connection, and by default opens a connection per request: the
// pool keeps that churn from costing a thread start per request). Bounded: connections beyond
// max_connections (or max_per_address from one IP) are closed at accept; a connection idle
// longer than idle_ms, or stalled in the middle of a request longer than io_ms, is closed.
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
  /** Connections being served or waiting for a session thread. */
  uint32_t open_connections();

 private:
  struct Accepted {
    int fd;
    std::string ip;
  };
  void accept_loop();
  void session_loop();
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
  std::vector<std::thread> sessions_;
  uint32_t idle_ = 0;    // session threads waiting for a connection
  uint32_t active_ = 0;  // connections queued or being served
  std::map<std::string, uint32_t> per_ip_;
};

}  // namespace mcwire
