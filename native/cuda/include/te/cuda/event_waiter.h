// Waits for CUDA events off the caller's thread: record() records an event on a stream of
// the caller's (the work queued there so far), and one waiter thread polls the pending
// events with cudaEventQuery and reports each once the GPU has passed it. A Node addon
// turns the report into a settled promise, so the JS thread never blocks on the GPU (the
// layerwise `layerReady(layer, ready)` hook, an encoder's "output ready").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "te/cuda/copy_runtime.h"

namespace te::cuda {

class EventWaiter {
 public:
  /** Called on the waiter thread (or in close()) once per recorded event: ok, or why not. */
  using Done = std::function<void(uint64_t id, const Error& error)>;

  /** At most `max_pending` events wait at once; one more is refused (POOL_EXHAUSTED). */
  EventWaiter(std::shared_ptr<CopyRuntime> runtime, Done done, size_t max_pending = 4096);
  ~EventWaiter();
  EventWaiter(const EventWaiter&) = delete;
  EventWaiter& operator=(const EventWaiter&) = delete;

  /**
   * Records an event on `stream` (a cudaStream_t; 0 is the legacy default stream) of
   * cuda:`device`, on the calling thread. On success `*id` names it and done(id) follows;
   * on a synchronous failure (no device, a bad stream, too many pending, closed) the error
   * is returned and done is never called.
   */
  Error record(int device, uint64_t stream, uint64_t* id);

  /** Events recorded and not yet reported. */
  size_t pending() const;

  /** Reports every pending event as ABORTED and joins the waiter thread. Idempotent. */
  void close();

 private:
  struct Pending {
    uint64_t id;
    int device;
    void* event;
  };
  void run();
  void recycle(int device, void* event);

  std::shared_ptr<CopyRuntime> rt_;
  Done done_;
  size_t max_pending_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> queue_;  // recorded, not yet seen by the waiter thread
  size_t outstanding_ = 0;      // recorded and not reported
  uint64_t next_id_ = 1;
  bool closing_ = false;
  bool started_ = false;
  std::thread thread_;
  // Created events kept for reuse, per device (creating one per layer would cost a driver call each).
  std::vector<std::pair<int, void*>> spare_;
};

}  // namespace te::cuda
