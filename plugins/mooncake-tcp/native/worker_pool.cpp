#include "worker_pool.h"

#include <pthread.h>

namespace tetcp {

void WorkerPool::run(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      if (workers_.empty())
        for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { work(); });
      jobs_.push_back(std::move(job));
      cv_.notify_one();
      return;
    }
  }
  job();
}

void WorkerPool::stop() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    workers.swap(workers_);
    cv_.notify_all();
  }
  for (auto& t : workers) t.join();
  // Jobs queued while no worker was started (none: run() starts them) or left by workers
  // that saw `stopped_` first: every job runs exactly once.
  std::deque<std::function<void()>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(jobs_);
  }
  for (auto& job : left) job();
}

void WorkerPool::work() {
  pthread_setname_np(pthread_self(), "te-tcp-copy");
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopped_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopped and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace tetcp
