#include "te/cuda/copy_runtime.h"

#include "te/cuda/device.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace te::cuda {

namespace {

#if TE_HAVE_CUDA
class CudaRuntime : public CopyRuntime {
 public:
  Error set_device(int device) override { return use_device(device); }
  Error create_stream(void** s) override {
    cudaStream_t st = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e != cudaSuccess) return runtime_error("cudaStreamCreateWithFlags", e);
    *s = st;
    return Error::none();
  }
  void destroy_stream(void* s) override { cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
  Error create_event(void** ev) override {
    cudaEvent_t e = nullptr;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r != cudaSuccess) return runtime_error("cudaEventCreateWithFlags", r);
    *ev = e;
    return Error::none();
  }
  void destroy_event(void* ev) override { cudaEventDestroy(static_cast<cudaEvent_t>(ev)); }
  Error copy_async(uint64_t dst, uint64_t src, uint64_t len, void* s) override {
    cudaError_t e = cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len,
                                    cudaMemcpyDefault, static_cast<cudaStream_t>(s));
    return e == cudaSuccess ? Error::none() : runtime_error("cudaMemcpyAsync", e);
  }
  Error record_event(void* ev, void* s) override {
    cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(ev), static_cast<cudaStream_t>(s));
    return e == cudaSuccess ? Error::none() : runtime_error("cudaEventRecord", e);
  }
  Error query_event(void* ev, bool* ready) override {
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(ev));
    *ready = e != cudaErrorNotReady;
    if (e == cudaSuccess || e == cudaErrorNotReady) return Error::none();
    return runtime_error("cudaEventQuery (copy failed on the device)", e);
  }
  Error synchronize_stream(void* s) override {
    cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(s));
    return e == cudaSuccess ? Error::none() : runtime_error("cudaStreamSynchronize", e);
  }
};
#else
class NoCudaRuntime : public CopyRuntime {
  static Error none_here() { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }

 public:
  Error set_device(int) override { return none_here(); }
  Error create_stream(void**) override { return none_here(); }
  void destroy_stream(void*) override {}
  Error create_event(void**) override { return none_here(); }
  void destroy_event(void*) override {}
  Error copy_async(uint64_t, uint64_t, uint64_t, void*) override { return none_here(); }
  Error record_event(void*, void*) override { return none_here(); }
  Error query_event(void*, bool* ready) override {
    *ready = true;
    return none_here();
  }
  Error synchronize_stream(void*) override { return none_here(); }
};
#endif

}  // namespace

std::shared_ptr<CopyRuntime> cuda_runtime() {
#if TE_HAVE_CUDA
  static auto rt = std::make_shared<CudaRuntime>();
#else
  static auto rt = std::make_shared<NoCudaRuntime>();
#endif
  return rt;
}

}  // namespace te::cuda
