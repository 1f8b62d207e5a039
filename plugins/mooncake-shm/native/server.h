// The target side of mooncake-shm: admits same-user connections, validates every request
// against this process's registry, and runs the copies on its own threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pools.h"
#include "socket.h"
#include "transport.h"

namespace teshm {

class Server {
 public:
  Server(Transport* owner, const Options& opt, te::MemoryRegistry& registry);
  ~Server();
  Status start(std::string* err);
  /** Stops accepting, answers queued work with ABORTED without copying, joins every thread. */
  void stop();

  struct Conn;
  struct Work;

  ServerStats stats() const {
    ServerStats s;
    s.pending_peak = pending_peak_.load();
    s.read_pauses = read_pauses_.load();
    s.pool_chunks = pool_chunks_.load();
    s.process_vm_chunks = process_vm_chunks_.load();
    s.pools_mapped = peer_pools_mapped();
    s.completion_messages = completion_messages_.load();
    s.work_allocations = work_allocations_.load();
    return s;
  }

 private:
  void loop();
  void copy_worker(uint32_t slot);
  void accept_all();
  /** Out of descriptors: the listener leaves the epoll set for te::kDescriptorRetryMs (no spinning on it). */
  void pause_accepting(int err);
  /** Loop thread: puts the listener back once its pause is over. */
  void resume_accepting();
  void drop_silent();
  void read_conn(const std::shared_ptr<Conn>& c);
  Status handle_hello(Conn& c, const Hello& h, int ctl_fd, std::string* why);
  /** Maps an announced pool of the initiator; a pool that cannot be mapped is logged and left out. */
  void handle_pool(Conn& c, const PoolAd& ad, int fd);
  void handle_requests(const std::shared_ptr<Conn>& c, const std::vector<Request>& reqs);
  void drop(const std::shared_ptr<Conn>& c, const std::string& why);
  void finish(Work& w);
  /** Loop thread: a Work to fill, a spare one when one is free. */
  std::shared_ptr<Work> take_work();
  void complete(Conn& c, uint64_t seq, int32_t status, bool flush_now);
  void flush_locked(Conn& c);
  void watch_locked(Conn& c);
  void wake();

  Transport* owner_;
  const Options& opt_;
  te::MemoryRegistry& registry_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread loop_thread_;
  std::vector<std::thread> copy_threads_;
  std::unordered_map<int, std::shared_ptr<Conn>> conns_;  // loop thread only
  static constexpr int kSweepMs = 250;                    // how often silent connections are looked for
  std::chrono::steady_clock::time_point last_sweep_{};
  bool accept_paused_ = false;       // loop thread only
  bool out_of_descriptors_ = false;  // in an episode (logged once); ends at the next accept
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::shared_ptr<Work>> queue_;
  // A Work allocated by the loop thread and freed by a copy thread made every request take
  // glibc's arena lock from two threads at once: 60% of the target's futex calls (64 KiB,
  // batches of 16, 16 in flight). The copy threads hand finished Works back instead (under
  // qmu_, at their next pop); the loop thread takes them (under qmu_, when it queues a
  // message) into spare_, which only it touches, and reuses them.
  std::vector<std::shared_ptr<Work>> returned_;     // under qmu_
  std::vector<std::shared_ptr<Work>> handed_back_;  // loop thread only: returned_ swapped out
  std::vector<std::shared_ptr<Work>> spare_;        // loop thread only
  std::vector<std::shared_ptr<Work>> admitted_;     // loop thread only: one message's Works, kept between messages
  std::atomic<uint64_t> work_allocations_{0};
  std::atomic<uint64_t> pending_peak_{0};
  std::atomic<uint64_t> read_pauses_{0};
  std::atomic<uint64_t> pool_chunks_{0};
  std::atomic<uint64_t> process_vm_chunks_{0};
  std::atomic<uint64_t> completion_messages_{0};
};

}  // namespace teshm
