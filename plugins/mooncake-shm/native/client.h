// The initiator side of mooncake-shm: connections to targets, batches, cancellation.
// One lock (mu_) guards all of it; submit and cancel run on the JS thread, everything else
// on the client's loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pools.h"
#include "socket.h"
#include "transport.h"

namespace teshm {

class Client {
 public:
  Client(Transport* owner, const Options& opt, te::MemoryRegistry& registry, const LocalPools& pools);
  ~Client();
  Status start(std::string* err);
  /** Revokes every connection, waits (bounded) until no target copies, fails what is left with ABORTED. */
  void stop();

  uint64_t open_peer(const std::string& socket_name, uint64_t epoch, const std::string& segment);
  void close_peer(uint64_t id);
  Status submit(uint64_t peer, const uint8_t* ops, const uint64_t* local, const uint64_t* remote,
                const uint64_t* lengths, size_t n, const uint8_t* notify, size_t notify_len, uint64_t* batch_id,
                std::string* err);
  void cancel(uint64_t batch, int32_t status);
  /** A pool was freed: every target it was announced to drops its mapping (POOL_GONE). */
  void forget_pool(uint32_t id);
  std::shared_ptr<Batch> take_batch(uint64_t id);

  struct Peer;

 private:
  /**
   * A request, or a message in its place in the stream: a batch's notification (kNotify), a
   * pool's announcement (kPool, before the first request on it) or its end (kPoolGone).
   */
  struct Pending {
    std::shared_ptr<Batch> batch;
    size_t index = 0;
    Request req;
    std::shared_ptr<LocalPool> pool;  // kPool: keeps the memfd open until it was sent
  };
  static constexpr size_t kNotify = SIZE_MAX;
  static constexpr size_t kPool = SIZE_MAX - 1;
  static constexpr size_t kPoolGone = SIZE_MAX - 2;
  static bool is_request(const Pending& q) { return q.index < kPoolGone; }
  /** Names the pool holding a request's local range, announcing it first on this connection. */
  void tag_pool_locked(Peer& p, Request& req);
  /** Sends the message at the head of `unsent` that is not a request; false when the socket is full. */
  bool send_control_locked(Peer& p);

  void loop();
  void wake();
  void connect_locked(Peer& p);
  void read_peer_locked(const std::shared_ptr<Peer>& p);
  void on_reply_locked(Peer& p, const HelloReply& r);
  void flush_locked(Peer& p);
  void arm_locked(Peer& p, bool out);
  void complete_locked(Peer& p, const std::shared_ptr<Batch>& b, size_t index, int32_t status);
  /** Every request is terminal: send the notification if it is due, else report the batch. */
  void settle_or_notify_locked(Peer& p, const std::shared_ptr<Batch>& b);
  void finish_locked(const std::shared_ptr<Batch>& b);
  /** Starts the fence: the peer fails once the target provably copies nothing more. */
  void revoke_locked(Peer& p, int32_t status, const std::string& why);
  /** Fails every request of the peer and closes it; only when no target copy can still run. */
  void fail_locked(Peer& p, int32_t status, const std::string& why);
  int timers_locked();

  Transport* owner_;
  const Options& opt_;
  te::MemoryRegistry& registry_;
  const LocalPools& pools_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  uint64_t next_peer_ = 1;
  uint64_t next_batch_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers_;
  std::unordered_map<int, std::shared_ptr<Peer>> by_fd_;
  std::unordered_map<uint64_t, std::shared_ptr<Batch>> batches_;
  std::unordered_set<uint64_t> cancelling_;
};

}  // namespace teshm
