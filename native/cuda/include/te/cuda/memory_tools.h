// Plain device memory helpers for tests, benchmarks and Node users without another CUDA
// library: cudaMalloc/cudaFree, host<->device copies, and the same-process cudaMemcpy
// baseline the GPU benchmark compares against. Every call returns an Error naming the call.
#pragma once

#include <cstdint>

#include "te/cuda/errors.h"

namespace te::cuda {

Error device_alloc(int device, uint64_t bytes, uint64_t* out);
Error device_free(int device, uint64_t addr);
Error copy_to_device(int device, uint64_t dst, const void* src, uint64_t bytes);
Error copy_to_host(int device, void* dst, uint64_t src, uint64_t bytes);
Error device_memset(int device, uint64_t dst, int value, uint64_t bytes);
/**
 * Same-process device-to-device baseline: `iterations` cudaMemcpyAsync of `bytes` on one
 * stream, timed with CUDA events after a warm-up copy. Seconds per copy in `*seconds`.
 */
Error baseline_copy(int device, uint64_t dst, uint64_t src, uint64_t bytes, int iterations, double* seconds);

}  // namespace te::cuda
