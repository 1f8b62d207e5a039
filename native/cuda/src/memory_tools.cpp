#include "te/cuda/memory_tools.h"

#include "te/cuda/device.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace te::cuda {

#if !TE_HAVE_CUDA
Error device_alloc(int, uint64_t, uint64_t*) { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }
Error device_free(int, uint64_t) { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }
Error copy_to_device(int, uint64_t, const void*, uint64_t) {
  return Error::make(TE_NO_DEVICE, built_without_cuda_reason());
}
Error copy_to_host(int, void*, uint64_t, uint64_t) { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }
Error device_memset(int, uint64_t, int, uint64_t) { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }
Error baseline_copy(int, uint64_t, uint64_t, uint64_t, int, double*) {
  return Error::make(TE_NO_DEVICE, built_without_cuda_reason());
}
#else

#define TE_TRY(call)                                        \
  do {                                                      \
    cudaError_t e_ = (call);                                \
    if (e_ != cudaSuccess) return runtime_error(#call, e_); \
  } while (0)

Error device_alloc(int device, uint64_t bytes, uint64_t* out) {
  Error e = use_device(device);
  if (!e.ok()) return e;
  void* p = nullptr;
  TE_TRY(cudaMalloc(&p, bytes));
  *out = reinterpret_cast<uint64_t>(p);
  return Error::none();
}

Error device_free(int device, uint64_t addr) {
  Error e = use_device(device);
  if (!e.ok()) return e;
  TE_TRY(cudaFree(reinterpret_cast<void*>(addr)));
  return Error::none();
}

Error copy_to_device(int device, uint64_t dst, const void* src, uint64_t bytes) {
  Error e = use_device(device);
  if (!e.ok()) return e;
  TE_TRY(cudaMemcpy(reinterpret_cast<void*>(dst), src, bytes, cudaMemcpyHostToDevice));
  return Error::none();
}

Error copy_to_host(int device, void* dst, uint64_t src, uint64_t bytes) {
  Error e = use_device(device);
  if (!e.ok()) return e;
  TE_TRY(cudaMemcpy(dst, reinterpret_cast<const void*>(src), bytes, cudaMemcpyDeviceToHost));
  return Error::none();
}

Error device_memset(int device, uint64_t dst, int value, uint64_t bytes) {
  Error e = use_device(device);
  if (!e.ok()) return e;
  TE_TRY(cudaMemset(reinterpret_cast<void*>(dst), value, bytes));
  TE_TRY(cudaDeviceSynchronize());
  return Error::none();
}

Error baseline_copy(int device, uint64_t dst, uint64_t src, uint64_t bytes, int iterations, double* seconds) {
  Error e = use_device(device);
  if (!e.ok()) return e;
  if (iterations < 1) iterations = 1;
  cudaStream_t s = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  TE_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Error out;
  auto fail = [&](const char* call, cudaError_t err) {
    if (out.ok()) out = runtime_error(call, err);
  };
  cudaError_t r;
  if ((r = cudaEventCreate(&a)) != cudaSuccess) fail("cudaEventCreate", r);
  if (out.ok() && (r = cudaEventCreate(&b)) != cudaSuccess) fail("cudaEventCreate", r);
  void* d = reinterpret_cast<void*>(dst);
  const void* sp = reinterpret_cast<const void*>(src);
  if (out.ok() && (r = cudaMemcpyAsync(d, sp, bytes, cudaMemcpyDeviceToDevice, s)) != cudaSuccess)
    fail("cudaMemcpyAsync (warm-up)", r);
  if (out.ok() && (r = cudaEventRecord(a, s)) != cudaSuccess) fail("cudaEventRecord", r);
  for (int i = 0; out.ok() && i < iterations; ++i)
    if ((r = cudaMemcpyAsync(d, sp, bytes, cudaMemcpyDeviceToDevice, s)) != cudaSuccess) fail("cudaMemcpyAsync", r);
  if (out.ok() && (r = cudaEventRecord(b, s)) != cudaSuccess) fail("cudaEventRecord", r);
  if (out.ok() && (r = cudaEventSynchronize(b)) != cudaSuccess) fail("cudaEventSynchronize", r);
  float ms = 0;
  if (out.ok() && (r = cudaEventElapsedTime(&ms, a, b)) != cudaSuccess) fail("cudaEventElapsedTime", r);
  if (out.ok()) *seconds = static_cast<double>(ms) / 1000.0 / iterations;
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  cudaStreamDestroy(s);
  return out;
}
#endif

}  // namespace te::cuda
