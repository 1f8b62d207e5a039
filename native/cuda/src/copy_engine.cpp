#include "te/cuda/copy_engine.h"

#include <pthread.h>

#include <chrono>

namespace te::cuda {

CopyEngine::CopyEngine(CopyEngineOptions options, Done done)
    : options_(options), rt_(options.runtime ? options.runtime : cuda_runtime()), done_(std::move(done)) {
  if (options_.streams_per_device < 1) options_.streams_per_device = 1;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "te-cuda-copy");
    run();
  });
}

CopyEngine::~CopyEngine() { stop(); }

void CopyEngine::submit(std::shared_ptr<CopyBatch> batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      live_[batch->id] = batch;
      queue_.push_back(std::move(batch));
      cv_.notify_one();
      return;
    }
  }
  batch->batch_status = TE_ABORTED;
  batch->error = "transport is closed";
  for (auto& s : batch->statuses) s = TE_ABORTED;
  done_(batch);
}

void CopyEngine::cancel(uint64_t id, int32_t status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (auto b = it->second.lock()) {
    int32_t expected = 0;
    b->cancel_status.compare_exchange_strong(expected, status);
  }
  cv_.notify_one();
}

void CopyEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    for (auto& [id, w] : live_) {
      if (auto b = w.lock()) {
        int32_t expected = 0;
        b->cancel_status.compare_exchange_strong(expected, TE_ABORTED);
      }
    }
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void CopyEngine::run() {
  using namespace std::chrono;
  int idle_polls = 0;
  for (;;) {
    std::deque<std::shared_ptr<CopyBatch>> taken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (inflight_.empty() && queue_.empty()) {
        if (stopping_) break;
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && queue_.empty()) break;
      }
      taken.swap(queue_);
    }
    for (auto& b : taken) start_batch(b);
    bool progressed = !taken.empty();
    for (size_t i = 0; i < inflight_.size();) {
      if (poll(*inflight_[i])) {
        auto b = inflight_[i];
        inflight_.erase(inflight_.begin() + static_cast<long>(i));
        finish(b);
        progressed = true;
      } else {
        ++i;
      }
    }
    if (!inflight_.empty() && !progressed) {
      // Copies take microseconds to milliseconds: spin briefly, then back off a little.
      if (++idle_polls < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(microseconds(idle_polls < 1024 ? 5 : 50));
    } else {
      idle_polls = 0;
    }
  }
  // Stopped: free streams and events.
  for (auto& [dev, list] : streams_) {
    if (!rt_->set_device(dev).ok()) continue;
    for (void* st : list) rt_->destroy_stream(st);
  }
  for (auto& [dev, list] : free_events_) {
    if (!rt_->set_device(dev).ok()) continue;
    for (void* e : list) rt_->destroy_event(e);
  }
  streams_.clear();
  free_events_.clear();
}

void* CopyEngine::stream_for(int device, Error* err) {
  auto& list = streams_[device];
  if (list.empty()) {
    for (int i = 0; i < options_.streams_per_device; ++i) {
      void* st = nullptr;
      Error e = rt_->create_stream(&st);
      if (!e.ok()) {
        *err = e;
        return nullptr;
      }
      list.push_back(st);
    }
  }
  size_t& next = next_stream_[device];
  void* st = list[next % list.size()];
  ++next;
  return st;
}

void* CopyEngine::event_for(int device, Error* err) {
  auto& list = free_events_[device];
  if (!list.empty()) {
    void* e = list.back();
    list.pop_back();
    return e;
  }
  void* ev = nullptr;
  Error e = rt_->create_event(&ev);
  if (!e.ok()) {
    *err = e;
    return nullptr;
  }
  return ev;
}

void CopyEngine::fail_copy(CopyBatch& b, uint32_t index, const Error& err) {
  // The runtime's "invalid argument" for a copy means the pointers were not copyable: the
  // request failed, the caller's arguments were checked already.
  int32_t status = err.status == TE_INVALID_ARGUMENT ? TE_TRANSFER_FAILED : err.status;
  b.fail(index, status, err.message);
  if (b.copy_error == 0) b.copy_error = status;
}

void CopyEngine::start_batch(const std::shared_ptr<CopyBatch>& b) {
  if (b->cancel_status.load() != 0) {
    finish(b);
    return;
  }
  try {
    if (b->prepare) b->prepare(*b);
  } catch (const std::exception& e) {
    b->batch_status = TE_INTERNAL;
    b->error = std::string("preparing the batch failed: ") + e.what();
  }
  b->prepare = nullptr;
  if (b->batch_status != 0 || b->ops.empty()) {
    finish(b);
    return;
  }
  // Streams used by this batch, per device: one event is recorded on each after the copies.
  std::map<int, std::vector<void*>> used;
  // Requests handled so far, issued or failed: those after it were never started (cancel).
  size_t handled = 0;
  for (const CopyOp& op : b->ops) {
    if ((handled & 255) == 0 && b->cancel_status.load() != 0)
      break;  // stop issuing; the rest fail with the cancel status
    ++handled;
    Error err = rt_->set_device(op.device);
    void* stream = err.ok() ? stream_for(op.device, &err) : nullptr;
    if (!err.ok()) {
      fail_copy(*b, op.index, err);
      continue;
    }
    const uint64_t slice = options_.slice_bytes ? options_.slice_bytes : op.len;
    for (uint64_t off = 0; off < op.len;) {
      uint64_t n = op.len - off < slice ? op.len - off : slice;
      err = rt_->copy_async(op.dst + off, op.src + off, n, stream);
      if (!err.ok()) {
        fail_copy(*b, op.index, err);
        break;
      }
      auto& list = used[op.device];
      bool seen = false;
      for (void* st : list) seen = seen || st == stream;
      if (!seen) list.push_back(stream);
      off += n;
      if (off < op.len && !(stream = stream_for(op.device, &err))) {
        fail_copy(*b, op.index, err);  // slices already issued still complete before the batch does
        break;
      }
    }
  }
  for (size_t i = handled; i < b->ops.size(); ++i) b->statuses[b->ops[i].index] = b->cancel_status.load();
  for (auto& [dev, streams] : used) {
    Error err = rt_->set_device(dev);
    for (void* st : streams) {
      void* ev = err.ok() ? event_for(dev, &err) : nullptr;
      Error rec = ev ? rt_->record_event(ev, st) : err;
      if (!ev || !rec.ok()) {
        // Without an event the copies cannot be tracked: wait for the stream instead.
        Error se = rt_->synchronize_stream(st);
        if (!se.ok()) {
          b->gpu_error = true;
          if (b->error.empty()) b->error = se.message;
        }
        if (ev) free_events_[dev].push_back(ev);
        continue;
      }
      b->events.emplace_back(dev, ev);
    }
  }
  if (b->events.empty()) {
    finish(b);
    return;
  }
  inflight_.push_back(b);
}

bool CopyEngine::poll(CopyBatch& b) {
  while (!b.events.empty()) {
    auto [dev, ev] = b.events.back();
    if (!rt_->set_device(dev).ok()) return false;
    bool ready = false;
    Error e = rt_->query_event(ev, &ready);
    if (!ready) return false;
    if (!e.ok()) {
      b.gpu_error = true;
      if (b.error.empty()) b.error = e.message;
    }
    free_events_[dev].push_back(ev);
    b.events.pop_back();
  }
  return true;
}

void CopyEngine::finish(const std::shared_ptr<CopyBatch>& b) {
  const int32_t cancel = b->cancel_status.load();
  if (cancel != 0)
    b->batch_status = cancel;
  else if (b->gpu_error && b->batch_status == 0)
    b->batch_status = TE_TRANSFER_FAILED;
  uint64_t bytes = 0;
  for (size_t i = 0; i < b->statuses.size(); ++i) {
    int32_t& s = b->statuses[i];
    if (s == kPending)
      s = cancel != 0 ? cancel : b->gpu_error ? TE_TRANSFER_FAILED : b->batch_status != 0 ? b->batch_status : TE_OK;
    else if (s > 0)
      s = cancel != 0 ? cancel : b->batch_status != 0 ? b->batch_status : TE_INTERNAL;  // never prepared
    if (s == TE_OK) bytes += b->lengths[i];
  }
  b->bytes = bytes;
  // A request whose copy failed fails the batch too; the others keep their own status.
  if (b->batch_status == 0 && b->copy_error != 0) b->batch_status = b->copy_error;
  // Nothing of this batch is touched any more: release leases and imports before reporting.
  b->leases.clear();
  b->keep.clear();
  b->ops.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(b->id);
  }
  done_(b);
}

}  // namespace te::cuda
