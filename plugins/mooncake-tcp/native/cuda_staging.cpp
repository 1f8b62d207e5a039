#include "cuda_staging.h"

#include <cstdio>
#include <cstring>
#include <mutex>

#include "te/cuda/device.h"
#include "te/cuda/driver.h"
#include "te/cuda/errors.h"
#include "te/hex.h"
#include "te/memory_registry.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tetcp {

using te::hex;

namespace {
[[maybe_unused]] te::Status fail_with(const te::cuda::Error& e, std::string* why) {
  if (why) *why = e.message;
  return static_cast<te::Status>(e.status);
}

[[maybe_unused]] std::string without_cuda() {
  return std::string("mooncake-tcp was built without CUDA: ") + te::cuda::built_without_cuda_reason();
}
}  // namespace

bool built_with_cuda() { return TE_HAVE_CUDA != 0; }

// ---------------------------------------------------------------- DeviceMap

// DeviceMap: device_map.h.

#if !TE_HAVE_CUDA

te::Status check_device_range(uint64_t, uint64_t, int, std::string* why) {
  *why = without_cuda();
  return te::TE_MEMORY_KIND_UNSUPPORTED;
}
te::Status copy_any(int, uint64_t, uint64_t, uint64_t, std::string* why) {
  *why = without_cuda();
  return te::TE_MEMORY_KIND_UNSUPPORTED;
}
void Stager::cuda_release() {}
uint8_t* Stager::cuda_buffer(te::Status* status, std::string* why) {
  *status = te::TE_MEMORY_KIND_UNSUPPORTED;
  *why = without_cuda();
  return nullptr;
}
te::Status Stager::cuda_copy(int, void*, const void*, uint64_t, const char*, std::string* why) {
  *why = without_cuda();
  return te::TE_MEMORY_KIND_UNSUPPORTED;
}

#else

te::Status check_device_range(uint64_t addr, uint64_t len, int device, std::string* why) {
  te::cuda::Error e = te::cuda::use_device(device);  // NO_DEVICE with the probe's reason
  if (!e.ok()) return fail_with(e, why);
  std::string no_driver;
  const te::cuda::DriverApi* d = te::cuda::driver(&no_driver);
  if (!d) {
    *why = "no CUDA device: " + no_driver;
    return te::TE_NO_DEVICE;
  }
  const CUdeviceptr p = static_cast<CUdeviceptr>(addr);
  unsigned int type = 0;
  CUresult r = d->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE) {
    *why =
        hex(addr) + " is not CUDA device memory" +
        (r != CUDA_SUCCESS ? " (" + te::cuda::driver_error_text("cuPointerGetAttribute(MEMORY_TYPE)", r) + ")"
                           : std::string(type == CU_MEMORYTYPE_HOST ? " (it is pinned host memory: register it as cpu)"
                                                                    : " (memory type " + std::to_string(type) + ")"));
    return te::TE_MEMORY_KIND_UNSUPPORTED;
  }
  int ordinal = -1;
  r = d->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
  if (r != CUDA_SUCCESS) return fail_with(te::cuda::driver_error("cuPointerGetAttribute(DEVICE_ORDINAL)", r), why);
  if (ordinal != device) {
    *why = hex(addr) + " is memory of cuda:" + std::to_string(ordinal) + ", not cuda:" + std::to_string(device);
    return te::TE_INVALID_ARGUMENT;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  r = d->cuMemGetAddressRange(&base, &size, p);
  if (r != CUDA_SUCCESS) return fail_with(te::cuda::driver_error("cuMemGetAddressRange", r), why);
  if (!te::range_within(base, size, addr, len)) {
    *why = "range " + hex(addr) + "+" + std::to_string(len) + " reaches past its allocation " + hex(base) + "+" +
           std::to_string(size) + " (one registration must lie in one device allocation)";
    return te::TE_ADDRESS_OUT_OF_RANGE;
  }
  return te::TE_OK;
}

te::Status copy_any(int device, uint64_t dst, uint64_t src, uint64_t len, std::string* why) {
  te::cuda::Error e = te::cuda::use_device(device);
  if (!e.ok()) return fail_with(e, why);
  cudaError_t c = cudaMemcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len, cudaMemcpyDefault);
  // cudaMemcpy does not wait for device-to-device copies: wait here, the copy must be done
  // before the request completes (and before its leases are released).
  if (c == cudaSuccess) c = cudaStreamSynchronize(nullptr);
  if (c != cudaSuccess) {
    cudaGetLastError();
    return fail_with(te::cuda::runtime_error("cudaMemcpy (same-process, cudaMemcpyDefault)", c), why);
  }
  return te::TE_OK;
}

void Stager::cuda_release() {
  // Errors are ignored: at process exit cudart may already be unloading.
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!streams_[i]) continue;
    if (cudaSetDevice(static_cast<int>(i)) == cudaSuccess) cudaStreamDestroy(static_cast<cudaStream_t>(streams_[i]));
  }
  if (buf_) cudaFreeHost(buf_);
  cudaGetLastError();
}

uint8_t* Stager::cuda_buffer(te::Status* status, std::string* why) {
  te::cuda::Error e = te::cuda::require_devices();
  if (!e.ok()) {
    *status = fail_with(e, why);
    return nullptr;
  }
  void* p = nullptr;
  cudaError_t c = cudaHostAlloc(&p, capacity_, cudaHostAllocPortable);
  if (c != cudaSuccess) {
    cudaGetLastError();
    *status = fail_with(te::cuda::runtime_error(
                            ("cudaHostAlloc of a " + std::to_string(capacity_) + "-byte staging buffer").c_str(), c),
                        why);
    return nullptr;
  }
  buf_ = p;
  return static_cast<uint8_t*>(buf_);
}

te::Status Stager::cuda_copy(int device, void* dst, const void* src, uint64_t len, const char* what, std::string* why) {
  te::cuda::Error e = te::cuda::use_device(device);
  if (!e.ok()) return fail_with(e, why);
  if (static_cast<size_t>(device) >= streams_.size()) streams_.resize(device + 1, nullptr);
  if (!streams_[device]) {
    cudaStream_t s = nullptr;
    cudaError_t c = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (c != cudaSuccess) {
      cudaGetLastError();
      return fail_with(te::cuda::runtime_error("cudaStreamCreateWithFlags", c), why);
    }
    streams_[device] = s;
  }
  auto s = static_cast<cudaStream_t>(streams_[device]);
  cudaError_t c = cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s);
  if (c == cudaSuccess) c = cudaStreamSynchronize(s);
  if (c != cudaSuccess) {
    cudaGetLastError();
    return fail_with(te::cuda::runtime_error(what, c), why);
  }
  return te::TE_OK;
}

#endif

Stager::~Stager() {
  if (!backend_) {
    cuda_release();
  } else if (buf_) {
    backend_->release(buf_);
  }
}

uint8_t* Stager::buffer(te::Status* status, std::string* why) {
  if (buf_) return static_cast<uint8_t*>(buf_);
  if (!backend_) return cuda_buffer(status, why);
  buf_ = backend_->alloc(capacity_, status, why);
  return static_cast<uint8_t*>(buf_);
}

te::Status Stager::copy(int device, void* dst, const void* src, uint64_t len, const char* what, std::string* why) {
  if (!backend_) return cuda_copy(device, dst, src, len, what, why);
  return backend_->copy(device, dst, src, len, why);
}

te::Status Stager::to_host(int device, void* dst, uint64_t src, uint64_t len, std::string* why) {
  return copy(device, dst, reinterpret_cast<const void*>(src), len, "cudaMemcpyAsync (device to pinned staging)", why);
}

te::Status Stager::to_device(int device, uint64_t dst, const void* src, uint64_t len, std::string* why) {
  return copy(device, reinterpret_cast<void*>(dst), src, len, "cudaMemcpyAsync (pinned staging to device)", why);
}

}  // namespace tetcp
