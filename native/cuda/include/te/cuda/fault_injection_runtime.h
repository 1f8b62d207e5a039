// A CopyRuntime over host memory for tests, named for what it is: copies are plain memcpy
// done when queued, streams and events are counters, and any call can be made to fail:
// the nth call of a kind (synchronously, as the runtime reports a bad argument or a dead
// context) or every event query (asynchronously, as a copy that faults on the device).
#pragma once

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "te/cuda/copy_runtime.h"

namespace te::cuda {

class FaultInjectionRuntime : public CopyRuntime {
 public:
  enum Call { SET_DEVICE, CREATE_STREAM, CREATE_EVENT, COPY, RECORD_EVENT, QUERY_EVENT, SYNCHRONIZE, kCalls };

  /** The `nth` (1-based) call of `call` from now on fails with `status`. */
  void fail_nth(Call call, int nth, int32_t status = TE_TRANSFER_FAILED) {
    std::lock_guard<std::mutex> l(mu_);
    fail_at_[call] = count_[call] + nth;
    fail_status_[call] = status;
  }
  /** Event queries report "not ready" this many times before answering (copies look slow). */
  void pending_polls(int n) { pending_polls_ = n; }
  int calls(Call call) const {
    std::lock_guard<std::mutex> l(mu_);
    return count_[call];
  }
  int live_streams() const { return streams_.load(); }
  int live_events() const { return events_.load(); }

  Error set_device(int) override { return step(SET_DEVICE, "cudaSetDevice"); }
  Error create_stream(void** s) override {
    Error e = step(CREATE_STREAM, "cudaStreamCreateWithFlags");
    if (e.ok()) *s = reinterpret_cast<void*>(static_cast<uintptr_t>(0x5000 + ++streams_));
    return e;
  }
  void destroy_stream(void*) override { --streams_; }
  Error create_event(void** ev) override {
    Error e = step(CREATE_EVENT, "cudaEventCreateWithFlags");
    if (e.ok()) *ev = reinterpret_cast<void*>(static_cast<uintptr_t>(0xe000 + ++events_));
    return e;
  }
  void destroy_event(void*) override { --events_; }
  Error copy_async(uint64_t dst, uint64_t src, uint64_t len, void*) override {
    Error e = step(COPY, "cudaMemcpyAsync");
    if (e.ok()) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len);
    return e;
  }
  Error record_event(void*, void*) override { return step(RECORD_EVENT, "cudaEventRecord"); }
  Error query_event(void*, bool* ready) override {
    if (pending_polls_ > 0) {
      --pending_polls_;
      *ready = false;
      return Error::none();
    }
    *ready = true;
    return step(QUERY_EVENT, "cudaEventQuery");
  }
  Error synchronize_stream(void*) override { return step(SYNCHRONIZE, "cudaStreamSynchronize"); }

 private:
  Error step(Call call, const char* name) {
    std::lock_guard<std::mutex> l(mu_);
    int n = ++count_[call];
    if (fail_at_[call] != 0 && n == fail_at_[call])
      return Error::make(fail_status_[call], std::string(name) + " failed: injected fault");
    return Error::none();
  }
  mutable std::mutex mu_;
  int count_[kCalls] = {};
  int fail_at_[kCalls] = {};
  int32_t fail_status_[kCalls] = {};
  std::atomic<int> pending_polls_{0};
  std::atomic<int> streams_{0}, events_{0};
};

}  // namespace te::cuda
