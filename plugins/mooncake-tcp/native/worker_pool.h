// Threads for work that blocks: CUDA staging copies (a device copy plus a stream
// synchronize) and same-process copies. An I/O loop serves many peers' connections; work
// that waits on a device or copies gigabytes must not run there, or one peer's slow copy
// holds up every other connection on that loop. A connection hands such work here and
// resumes when the work posts its result back to the connection's loop.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tetcp {

class WorkerPool {
 public:
  /** `threads` are started on the first run(), so a transport that never stages starts none. */
  explicit WorkerPool(int threads) : threads_(threads < 1 ? 1 : threads) {}
  ~WorkerPool() { stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /**
   * Any thread: runs `job` on a worker. The queue needs no bound of its own: each caller
   * (a lane, a server connection, a same-process batch) has at most one job queued at a time.
   * Once stopped, `job` runs on the calling thread.
   */
  void run(std::function<void()> job);
  /** Runs every queued job, then joins the workers. Idempotent. */
  void stop();

 private:
  void work();
  const int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> workers_;
  bool stopped_ = false;
};

}  // namespace tetcp
