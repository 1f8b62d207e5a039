// CUDA staging for mooncake-tcp: which registered regions are device memory, validation of a
// raw device range at registration, pinned host staging buffers (one per direction of a
// lane or server connection, allocated on first use) and the copies through them.
//
// Built on te_cuda (native/cuda): cudart is linked statically and the driver API is loaded
// with dlopen, so the addon loads on machines without a GPU; without the toolkit at build
// time (TE_HAVE_CUDA=0) every CUDA entry point answers "built without CUDA".
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_map.h"
#include "te/status.h"

namespace tetcp {

/** Whether this addon was built with the CUDA toolkit. */
bool built_with_cuda();

/**
 * Checks that cuda:`device` is usable here and that [addr, addr+len) is device memory of it
 * (cuPointerGetAttribute: memory type and device ordinal; cuMemGetAddressRange: the range
 * lies in one allocation). NO_DEVICE with te_cuda's probe reason when there is no device,
 * MEMORY_KIND_UNSUPPORTED when built without CUDA or the pointer is not device memory.
 */
te::Status check_device_range(uint64_t addr, uint64_t len, int device, std::string* why);

/** Same-process copy where either side may be device memory (cudaMemcpy, cudaMemcpyDefault). */
te::Status copy_any(int device, uint64_t dst, uint64_t src, uint64_t len, std::string* why);

/**
 * Where staging buffers come from and how they are filled: CUDA (pinned memory, device
 * copies) unless a transport is given another. The C++ tests give a host one (memory from
 * the heap, memcpy after an injected delay) so that the staging paths and their ordering
 * run without a GPU.
 */
class StagingBackend {
 public:
  virtual ~StagingBackend() = default;
  virtual void* alloc(uint64_t bytes, te::Status* status, std::string* why) = 0;
  virtual void release(void* p) = 0;
  virtual te::Status copy(int device, void* dst, const void* src, uint64_t len, std::string* why) = 0;
};

/**
 * A pinned host buffer (cudaHostAlloc, portable) and one non-blocking stream per device.
 * Copies are cudaMemcpyAsync on that stream + synchronize, so they run on a worker thread
 * (worker_pool.h), never on an I/O loop; one copy at a time per Stager.
 */
class Stager {
 public:
  explicit Stager(uint64_t capacity, StagingBackend* backend = nullptr) : capacity_(capacity), backend_(backend) {}
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;
  uint64_t capacity() const { return capacity_; }
  /** The buffer once buffer() succeeded, else nullptr. */
  uint8_t* data() const { return static_cast<uint8_t*>(buf_); }
  /** The pinned buffer, allocated on first use; nullptr with status/why when that fails. */
  uint8_t* buffer(te::Status* status, std::string* why);
  /** Device (or any) memory -> staging buffer. */
  te::Status to_host(int device, void* dst, uint64_t src, uint64_t len, std::string* why);
  /** Staging buffer -> device (or any) memory. */
  te::Status to_device(int device, uint64_t dst, const void* src, uint64_t len, std::string* why);

 private:
  te::Status copy(int device, void* dst, const void* src, uint64_t len, const char* what, std::string* why);
  uint8_t* cuda_buffer(te::Status* status, std::string* why);
  te::Status cuda_copy(int device, void* dst, const void* src, uint64_t len, const char* what, std::string* why);
  void cuda_release();
  uint64_t capacity_;
  StagingBackend* backend_;
  void* buf_ = nullptr;
  std::vector<void*> streams_;  // by device ordinal
};

}  // namespace tetcp
