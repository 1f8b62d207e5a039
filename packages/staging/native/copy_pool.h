// A fixed set of worker threads. A batch (strided copies, or checksums) is split by bytes
// across them and the caller's thread waits; one batch runs at a time per pool (callers
// queue), so the threads never oversubscribe the CPUs the transport's I/O threads also need.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "strided_copy.h"

namespace te::staging {

class CopyPool {
 public:
  explicit CopyPool(size_t threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  /** Runs every job (already checked) and returns when all are done. Thread-safe. */
  void run(const std::vector<CopyJob>& jobs);
  /**
   * Runs `work(begin, end)` for each part [bounds[k], bounds[k + 1]) on its own thread (the
   * caller's takes the first) and returns when all are done. Thread-safe.
   */
  void run_parts(const std::vector<size_t>& bounds, const std::function<void(size_t, size_t)>& work);
  size_t threads() const { return workers_.size() + 1; }

 private:
  void work(size_t index);

  std::mutex batch_mutex_;  // one batch at a time
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(size_t, size_t)>* work_ = nullptr;
  std::vector<size_t> bounds_;
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace te::staging
