#include "te/cuda/errors.h"

#include "te/cuda/driver.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace te::cuda {

const char* built_without_cuda_reason() {
  return "no CUDA device: this addon was built without CUDA (the CUDA toolkit was not found at build time; "
         "install it at /usr/local/cuda and rebuild the plugin)";
}

#if TE_HAVE_CUDA
std::string runtime_error_text(const char* call, int err) {
  auto e = static_cast<cudaError_t>(err);
  return std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

int32_t runtime_status(int err) {
  switch (static_cast<cudaError_t>(err)) {
    case cudaSuccess:
      return TE_OK;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorInitializationError:
      return TE_NO_DEVICE;
    case cudaErrorMemoryAllocation:
      return TE_OUT_OF_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      return TE_INVALID_ARGUMENT;
    case cudaErrorNotSupported:
      return TE_UNSUPPORTED_OPERATION;
    default:
      return TE_TRANSFER_FAILED;
  }
}

Error runtime_error(const char* call, int err) {
  return Error::make(runtime_status(err), runtime_error_text(call, err));
}

std::string driver_error_text(const char* call, int result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (const DriverApi* d = driver()) {
    d->cuGetErrorName(static_cast<CUresult>(result), &name);
    d->cuGetErrorString(static_cast<CUresult>(result), &text);
  }
  std::string out = std::string(call) + " failed: " + (name ? name : ("CUresult " + std::to_string(result)).c_str());
  if (text) out += std::string(" (") + text + ")";
  return out;
}

int32_t driver_status(int result) {
  switch (static_cast<CUresult>(result)) {
    case CUDA_SUCCESS:
      return TE_OK;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return TE_NO_DEVICE;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return TE_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_VALUE:
      return TE_INVALID_ARGUMENT;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
      return TE_UNSUPPORTED_OPERATION;
    default:
      return TE_TRANSFER_FAILED;
  }
}

Error driver_error(const char* call, int result) {
  return Error::make(driver_status(result), driver_error_text(call, result));
}
#endif

}  // namespace te::cuda
