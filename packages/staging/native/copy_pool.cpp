#include "copy_pool.h"

namespace te::staging {

CopyPool::CopyPool(size_t threads) {
  // The calling thread takes the first share, so n threads means n - 1 workers.
  for (size_t i = 1; i < (threads == 0 ? 1 : threads); i++) workers_.emplace_back([this, i] { work(i); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : workers_) t.join();
}

void CopyPool::run(const std::vector<CopyJob>& jobs) {
  if (jobs.empty()) return;
  const CopyJob* data = jobs.data();
  run_parts(partition_by_bytes(jobs, threads()), [data](size_t begin, size_t end) { run_jobs(data, begin, end); });
}

void CopyPool::run_parts(const std::vector<size_t>& bounds, const std::function<void(size_t, size_t)>& work) {
  if (bounds.size() < 2) return;
  std::lock_guard<std::mutex> batch(batch_mutex_);
  const size_t parts = bounds.size() - 1;
  if (parts <= 1 || workers_.empty()) {
    work(bounds.front(), bounds.back());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work_ = &work;
    bounds_ = bounds;
    pending_ = parts - 1;
    generation_++;
  }
  start_.notify_all();
  work(bounds[0], bounds[1]);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  work_ = nullptr;
}

void CopyPool::work(size_t index) {
  size_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* task = nullptr;
    size_t begin = 0;
    size_t end = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      // A batch split into fewer parts than threads leaves the last workers idle.
      if (index + 1 >= bounds_.size()) continue;
      task = work_;
      begin = bounds_[index];
      end = bounds_[index + 1];
    }
    (*task)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace te::staging
