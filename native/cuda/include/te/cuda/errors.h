// Errors of the CUDA layer: a te status plus a message that names the failing call and the
// CUDA error ("cudaGetDeviceCount failed: cudaErrorInsufficientDriver (...)").
#pragma once

#include <cstdint>
#include <string>

#include "te/status.h"

namespace te::cuda {

struct Error {
  int32_t status = TE_OK;
  std::string message;
  bool ok() const { return status == TE_OK; }
  static Error none() { return {}; }
  static Error make(int32_t status, std::string message) { return Error{status, std::move(message)}; }
};

/** "built without CUDA ..." when the toolkit was missing at build time. */
const char* built_without_cuda_reason();

#if TE_HAVE_CUDA
/** Formats a runtime API failure: "<call> failed: cudaErrorX (description)". */
std::string runtime_error_text(const char* call, int err);
/** Maps a runtime error to a te status (no driver/device -> NO_DEVICE, out of memory -> OUT_OF_MEMORY, ...). */
int32_t runtime_status(int err);
/** Builds the Error of a failed runtime call. */
Error runtime_error(const char* call, int err);
/** Same for a driver API result (CUresult), using cuGetErrorName when libcuda is loaded. */
std::string driver_error_text(const char* call, int result);
int32_t driver_status(int result);
Error driver_error(const char* call, int result);
#endif

}  // namespace te::cuda
