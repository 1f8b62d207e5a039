// The initiator side: requests to a Mooncake target's data port. Each opened peer has a fixed
// number of lanes (threads); a lane runs its requests one after another, as a Mooncake target
// expects (no pipelining), over a kept connection (pool) or a new connection per request.
// A batch settles once every request is terminal: a cancelled or timed-out request's lane
// drops its connection first, so nothing touches the batch's memory after it settled.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net.h"
#include "te/memory_registry.h"
#include "te/status.h"

namespace mcwire {

struct InitiatorOptions {
  int connect_ms = 5000;
  int io_ms = 30000;
  /** Requests queued or running, all peers together; a submit beyond it fails POOL_EXHAUSTED. */
  uint64_t max_queued = 65536;
};

struct PeerOptions {
  std::string host;  // IP literal
  uint16_t port = 0;
  bool v2 = true;
  bool pool = true;
  uint32_t lanes = 4;
  /** The peer's published buffers: every remote range must lie inside one of them. */
  std::vector<std::pair<uint64_t, uint64_t>> buffers;
};

struct Batch {
  uint64_t id = 0;
  size_t n = 0;
  std::vector<uint8_t> ops;
  std::vector<uint64_t> local, remote, lengths;
  std::unique_ptr<std::atomic<int32_t>[]> statuses;
  std::atomic<size_t> remaining{0};
  std::atomic<int32_t> cancel_status{0};
  Clock::time_point deadline;
  std::atomic<bool> may_be_written{false};
  std::mutex mu;
  std::string error;  // the first failure, for the rejection's message
  void fail(size_t i, int32_t status, const std::string& why);
};

class Initiator {
 public:
  Initiator(const InitiatorOptions& o, const te::MemoryRegistry& registry, std::function<void(uint64_t)> on_batch)
      : o_(o), registry_(registry), on_batch_(std::move(on_batch)) {}
  ~Initiator() { close(); }
  uint64_t open_peer(const PeerOptions& p);
  void close_peer(uint64_t id);
  te::Status submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                    const uint64_t* lengths, size_t n, uint64_t timeout_ms, uint64_t* id, std::string* err);
  void cancel(uint64_t batch, int32_t status);
  std::shared_ptr<Batch> take_batch(uint64_t id);
  /** Stops every lane (queued and running requests end ABORTED). Idempotent. */
  void close();
  /** Data connections opened so far (tests compare pooled and per-request modes). */
  uint64_t connections_opened() const { return connects_.load(); }

 private:
  struct Lane {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<std::shared_ptr<Batch>, size_t>> queue;
    bool stop = false;
    int fd = -1;
  };
  struct Peer {
    PeerOptions o;
    std::vector<std::unique_ptr<Lane>> lanes;
    std::atomic<size_t> next{0};
  };
  void run_lane(Peer& p, Lane& l);
  /** Runs request `i` of `b` on lane `l`: checks, connects if needed, then its exchange. */
  void execute(Peer& p, Lane& l, Batch& b, size_t i);
  /** Gives lane `l` a live connection; false (request `i` failed) when none could be made. */
  bool connect_lane(Peer& p, Lane& l, Batch& b, size_t i, const std::function<bool()>& stopped);
  void finish(Batch& b);
  void stop_peer(Peer& p);

  InitiatorOptions o_;
  const te::MemoryRegistry& registry_;
  std::function<void(uint64_t)> on_batch_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Peer>> peers_;
  std::map<uint64_t, std::shared_ptr<Batch>> batches_;
  uint64_t next_peer_ = 1, next_batch_ = 1;
  std::atomic<uint64_t> queued_{0}, connects_{0};
  bool closed_ = false;
};

}  // namespace mcwire
