// The copy engine of the CUDA transports: one native thread takes batches, resolves them
// (the transport's `prepare`: bounds checks, handle imports), issues cudaMemcpyAsync on its
// own non-blocking streams (several per device, several batches in flight), records an
// event per stream used, and polls the events. Finished batches are handed to `done` on
// that thread; the addon forwards them through the core's completion bridge, so the JS
// thread never waits on the GPU.
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
#include <unordered_map>
#include <vector>

#include "te/cuda/copy_runtime.h"
#include "te/cuda/errors.h"
#include "te/memory_registry.h"

namespace te::cuda {

/** One device-to-device copy of a request (pointers valid in this process). */
struct CopyOp {
  uint64_t dst = 0;
  uint64_t src = 0;
  uint64_t len = 0;
  int device = 0;      // device whose streams issue the copy (the local memory's device)
  uint32_t index = 0;  // request index in the batch
};

/** Status value of a request that is still pending (never reported). */
constexpr int32_t kPending = 1;

struct CopyBatch {
  uint64_t id = 0;
  std::vector<uint8_t> opcodes;
  std::vector<uint64_t> local, remote, lengths;
  /** Per-request status; prepare() sets refusals, the engine the rest. */
  std::vector<int32_t> statuses;
  std::vector<CopyOp> ops;
  /** Leases on local (and same-process remote) regions: unregister waits for them. */
  std::vector<Lease> leases;
  /** Whatever must outlive the copies (imported allocations, peer state). */
  std::vector<std::shared_ptr<void>> keep;
  /** Runs on the engine thread before issuing; fills ops/statuses/leases/keep. */
  std::function<void(CopyBatch&)> prepare;
  std::atomic<int32_t> cancel_status{0};
  int32_t batch_status = 0;
  std::string error;
  uint64_t bytes = 0;

  void fail(uint32_t i, int32_t status, const std::string& why) {
    statuses[i] = status;
    if (error.empty()) error = "request " + std::to_string(i) + ": " + why;
  }

  // Engine-private.
  std::vector<std::pair<int, void*>> events;  // (device, cudaEvent_t)
  bool gpu_error = false;
  int32_t copy_error = 0;  // status of the first request whose copy could not be issued
};

struct CopyEngineOptions {
  int streams_per_device = 4;
  /** Requests longer than this are cut into slices spread over the streams (0: never). */
  uint64_t slice_bytes = 64ull << 20;
  /** The runtime the copies go through (default: cuda_runtime(); tests inject faults here). */
  std::shared_ptr<CopyRuntime> runtime;
};

class CopyEngine {
 public:
  using Done = std::function<void(std::shared_ptr<CopyBatch>)>;
  CopyEngine(CopyEngineOptions options, Done done);
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  /** Queues a batch (any thread). After stop() it completes at once with ABORTED. */
  void submit(std::shared_ptr<CopyBatch> batch);
  /**
   * Fails a batch with `status` (TIMEOUT/ABORTED): requests not issued yet are dropped,
   * copies already issued are awaited (a DMA cannot be recalled) before it completes.
   */
  void cancel(uint64_t id, int32_t status);
  /** Fails queued batches with ABORTED, waits for issued copies, joins the thread. Idempotent. */
  void stop();

 private:
  void run();
  void start_batch(const std::shared_ptr<CopyBatch>& b);
  bool poll(CopyBatch& b);
  void finish(const std::shared_ptr<CopyBatch>& b);
  void* stream_for(int device, Error* err);
  void* event_for(int device, Error* err);

  /** Fails request `index` (and the batch, when it is the first failure) with a copy error. */
  static void fail_copy(CopyBatch& b, uint32_t index, const Error& err);

  CopyEngineOptions options_;
  std::shared_ptr<CopyRuntime> rt_;
  Done done_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<CopyBatch>> queue_;
  std::unordered_map<uint64_t, std::weak_ptr<CopyBatch>> live_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread thread_;
  // Engine-thread state.
  std::vector<std::shared_ptr<CopyBatch>> inflight_;
  std::map<int, std::vector<void*>> streams_;
  std::map<int, size_t> next_stream_;
  std::map<int, std::vector<void*>> free_events_;
};

}  // namespace te::cuda
