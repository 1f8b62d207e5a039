#include "te/cuda/copy_engine.h"

#include <chrono>

#include "te/cuda/device.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace te::cuda {

CopyEngine::CopyEngine(CopyEngineOptions options, Done done) : options_(options), done_(std::move(done)) {
  if (options_.streams_per_device < 1) options_.streams_per_device = 1;
  thread_ = std::thread([this] { run(); });
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
      if (++idle_polls < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(microseconds(idle_polls < 1024 ? 5 : 50));
    } else {
      idle_polls = 0;
    }
  }
  // Stopped: free streams and events.
#if TE_HAVE_CUDA
  for (auto& [dev, list] : streams_) {
    if (!use_device(dev).ok()) continue;
    for (void* s : list) cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  for (auto& [dev, list] : free_events_) {
    if (!use_device(dev).ok()) continue;
    for (void* e : list) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
#endif
  streams_.clear();
  free_events_.clear();
}

void* CopyEngine::stream_for(int device, Error* err) {
#if TE_HAVE_CUDA
  auto& list = streams_[device];
  if (list.empty()) {
    for (int i = 0; i < options_.streams_per_device; ++i) {
      cudaStream_t s = nullptr;
      cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e != cudaSuccess) {
        *err = runtime_error("cudaStreamCreateWithFlags", e);
        return nullptr;
      }
      list.push_back(s);
    }
  }
  size_t& next = next_stream_[device];
  void* s = list[next % list.size()];
  ++next;
  return s;
#else
  *err = Error::make(TE_NO_DEVICE, built_without_cuda_reason());
  return nullptr;
#endif
}

void* CopyEngine::event_for(int device, Error* err) {
#if TE_HAVE_CUDA
  auto& list = free_events_[device];
  if (!list.empty()) {
    void* e = list.back();
    list.pop_back();
    return e;
  }
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    *err = runtime_error("cudaEventCreateWithFlags", e);
    return nullptr;
  }
  return ev;
#else
  *err = Error::make(TE_NO_DEVICE, built_without_cuda_reason());
  return nullptr;
#endif
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
#if TE_HAVE_CUDA
  // Streams used by this batch, per device: one event is recorded on each after the copies.
  std::map<int, std::vector<void*>> used;
  size_t issued = 0;
  for (const CopyOp& op : b->ops) {
    if ((issued & 255) == 0 && b->cancel_status.load() != 0) break;  // stop issuing; the rest fail with the cancel status
    Error err = use_device(op.device);
    void* stream = err.ok() ? stream_for(op.device, &err) : nullptr;
    if (!err.ok()) {
      b->fail(op.index, err.status, err.message);
      continue;
    }
    uint64_t off = 0;
    const uint64_t slice = options_.slice_bytes ? options_.slice_bytes : op.len;
    bool ok = true;
    while (off < op.len) {
      uint64_t n = op.len - off < slice ? op.len - off : slice;
      cudaError_t e = cudaMemcpyAsync(reinterpret_cast<void*>(op.dst + off), reinterpret_cast<const void*>(op.src + off), n,
                                      cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
      if (e != cudaSuccess) {
        Error re = runtime_error("cudaMemcpyAsync", e);
        b->fail(op.index, re.status == TE_INVALID_ARGUMENT ? TE_TRANSFER_FAILED : re.status, re.message);
        ok = false;
        break;
      }
      auto& list = used[op.device];
      bool seen = false;
      for (void* s : list) seen = seen || s == stream;
      if (!seen) list.push_back(stream);
      off += n;
      if (off < op.len) {
        stream = stream_for(op.device, &err);
        if (!stream) break;
      }
    }
    ++issued;
    if (!ok) continue;
  }
  for (size_t i = issued; i < b->ops.size(); ++i) b->statuses[b->ops[i].index] = b->cancel_status.load();
  for (auto& [dev, streams] : used) {
    Error err = use_device(dev);
    for (void* s : streams) {
      void* ev = err.ok() ? event_for(dev, &err) : nullptr;
      cudaError_t e = ev ? cudaEventRecord(static_cast<cudaEvent_t>(ev), static_cast<cudaStream_t>(s)) : cudaErrorUnknown;
      if (!ev || e != cudaSuccess) {
        // Without an event the copies cannot be tracked: wait for the stream instead.
        cudaError_t se = cudaStreamSynchronize(static_cast<cudaStream_t>(s));
        if (se != cudaSuccess) {
          b->gpu_error = true;
          if (b->error.empty()) b->error = runtime_error_text("cudaStreamSynchronize", se);
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
#else
  for (const CopyOp& op : b->ops) b->fail(op.index, TE_NO_DEVICE, built_without_cuda_reason());
  finish(b);
#endif
}

bool CopyEngine::poll(CopyBatch& b) {
#if TE_HAVE_CUDA
  while (!b.events.empty()) {
    auto [dev, ev] = b.events.back();
    if (!use_device(dev).ok()) return false;
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(ev));
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) {
      b.gpu_error = true;
      if (b.error.empty()) b.error = runtime_error_text("cudaEventQuery (copy failed on the device)", e);
    }
    free_events_[dev].push_back(ev);
    b.events.pop_back();
  }
#endif
  return true;
}

void CopyEngine::finish(const std::shared_ptr<CopyBatch>& b) {
  const int32_t cancel = b->cancel_status.load();
  if (cancel != 0) b->batch_status = cancel;
  else if (b->gpu_error && b->batch_status == 0) b->batch_status = TE_TRANSFER_FAILED;
  uint64_t bytes = 0;
  for (size_t i = 0; i < b->statuses.size(); ++i) {
    int32_t& s = b->statuses[i];
    if (s == kPending) s = cancel != 0 ? cancel : b->gpu_error ? TE_TRANSFER_FAILED : b->batch_status != 0 ? b->batch_status : TE_OK;
    else if (s > 0) s = cancel != 0 ? cancel : b->batch_status != 0 ? b->batch_status : TE_INTERNAL;  // never prepared
    if (s == TE_OK) bytes += b->lengths[i];
  }
  b->bytes = bytes;
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
