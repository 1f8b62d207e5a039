// The CUDA runtime calls the copy engine makes, behind an interface: the engine runs on the
// real runtime (cuda_runtime()), and its tests run it on FaultInjectionRuntime
// (fault_injection_runtime.h), a host-memory stand-in that fails chosen calls, so every
// error path of the engine runs in CI without a GPU.
#pragma once

#include <cstdint>
#include <memory>

#include "te/cuda/errors.h"

namespace te::cuda {

class CopyRuntime {
 public:
  virtual ~CopyRuntime() = default;
  /** Makes `device` current on the calling thread. */
  virtual Error set_device(int device) = 0;
  virtual Error create_stream(void** stream) = 0;
  virtual void destroy_stream(void* stream) = 0;
  virtual Error create_event(void** event) = 0;
  virtual void destroy_event(void* event) = 0;
  /** Queues a copy of `len` bytes on `stream` (cudaMemcpyAsync with cudaMemcpyDefault). */
  virtual Error copy_async(uint64_t dst, uint64_t src, uint64_t len, void* stream) = 0;
  virtual Error record_event(void* event, void* stream) = 0;
  /** `*ready` is false while work before the event is pending; an error means that work failed. */
  virtual Error query_event(void* event, bool* ready) = 0;
  virtual Error synchronize_stream(void* stream) = 0;
};

/** The CUDA runtime (a build without the toolkit answers NO_DEVICE to every call). */
std::shared_ptr<CopyRuntime> cuda_runtime();

}  // namespace te::cuda
