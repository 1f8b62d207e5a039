#include "allocator.h"

#include <unistd.h>

#include <map>
#include <mutex>

#include "te/cuda/device.h"
#include "te/cuda/driver.h"
#include "te/hex.h"
#include "te/memory_registry.h"

namespace tenvl {

using te::hex;
using te::cuda::Error;

namespace {
std::mutex allocations_mu;
std::map<uint64_t, Allocation> by_addr;
[[maybe_unused]] uint64_t next_id = 1;
}  // namespace

#if !TE_HAVE_CUDA
Error allocate(int, uint64_t, int, Allocation*) {
  return Error::make(te::TE_NO_DEVICE, te::cuda::built_without_cuda_reason());
}
Error release(uint64_t addr) {
  return Error::make(te::TE_INVALID_ARGUMENT, hex(addr) + " was not allocated by allocateFabricMemory()");
}
Error add_export(uint64_t, bool, Allocation*) {
  return Error::make(te::TE_NO_DEVICE, te::cuda::built_without_cuda_reason());
}
void remove_export(uint64_t) {}
#else

Error allocate(int device, uint64_t bytes, int handle_types, Allocation* out) {
  Error e = te::cuda::use_device(device);
  if (!e.ok()) return e;
  std::string why;
  const te::cuda::DriverApi* d = te::cuda::driver(&why);
  if (!d) return Error::make(te::TE_NO_DEVICE, "no CUDA device: " + why);
  if (bytes == 0) return Error::make(te::TE_INVALID_ARGUMENT, "cannot allocate 0 bytes");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  int types = 0;
  if (handle_types & kFabric) types |= CU_MEM_HANDLE_TYPE_FABRIC;
  if (handle_types & kPosixFd) types |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
  size_t gran = 0;
  CUresult r = d->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemGetAllocationGranularity", r);
  if (gran == 0) gran = 2u << 20;
  const uint64_t size = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  r = d->cuMemCreate(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) {
    Error err = te::cuda::driver_error("cuMemCreate", r);
    if ((handle_types & kFabric) &&
        (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_NOT_PERMITTED || r == CUDA_ERROR_INVALID_VALUE))
      err.message +=
          " (fabric handles need a multi-node NVLink system with IMEX running; on one machine use handleType "
          "'posix-fd')";
    return err;
  }
  CUdeviceptr ptr = 0;
  r = d->cuMemAddressReserve(&ptr, size, gran, 0, 0);
  if (r != CUDA_SUCCESS) {
    d->cuMemRelease(h);
    return te::cuda::driver_error("cuMemAddressReserve", r);
  }
  r = d->cuMemMap(ptr, size, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    d->cuMemAddressFree(ptr, size);
    d->cuMemRelease(h);
    return te::cuda::driver_error("cuMemMap", r);
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = d->cuMemSetAccess(ptr, size, &access, 1);
  if (r != CUDA_SUCCESS) {
    d->cuMemUnmap(ptr, size);
    d->cuMemAddressFree(ptr, size);
    d->cuMemRelease(h);
    return te::cuda::driver_error("cuMemSetAccess", r);
  }
  Allocation a;
  a.addr = ptr;
  a.size = size;
  a.requested = bytes;
  a.device = device;
  a.handle_types = handle_types;
  a.handle = h;
  std::lock_guard<std::mutex> lock(allocations_mu);
  a.id = next_id++;
  by_addr[a.addr] = a;
  *out = a;
  return Error::none();
}

Error release(uint64_t addr) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(allocations_mu);
    auto it = by_addr.find(addr);
    if (it == by_addr.end())
      return Error::make(te::TE_INVALID_ARGUMENT,
                         hex(addr) + " is not the start of memory from allocateFabricMemory()");
    if (it->second.exports > 0)
      return Error::make(te::TE_INVALID_ARGUMENT,
                         "memory at " + hex(addr) + " is still registered; unregister it before freeing");
    a = it->second;
    by_addr.erase(it);
  }
  const te::cuda::DriverApi* d = te::cuda::driver();
  if (!d) return Error::make(te::TE_NO_DEVICE, "no CUDA device: libcuda.so.1 is not loaded");
  te::cuda::use_device(a.device);
  CUresult r = d->cuMemUnmap(a.addr, a.size);
  if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemUnmap", r);
  d->cuMemAddressFree(a.addr, a.size);
  r = d->cuMemRelease(a.handle);
  if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemRelease", r);
  return Error::none();
}

Error add_export(uint64_t alloc_addr, bool posix_fd, Allocation* out) {
  std::lock_guard<std::mutex> lock(allocations_mu);
  auto it = by_addr.find(alloc_addr);
  if (it == by_addr.end())
    return Error::make(te::TE_MEMORY_NOT_REGISTERED, "allocation " + hex(alloc_addr) + " was freed");
  Allocation& a = it->second;
  if (posix_fd && a.fd < 0) {
    const te::cuda::DriverApi* d = te::cuda::driver();
    int fd = -1;
    CUresult r = d->cuMemExportToShareableHandle(&fd, a.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR)", r);
    a.fd = fd;
  }
  a.exports++;
  *out = a;
  return Error::none();
}

void remove_export(uint64_t alloc_addr) {
  std::lock_guard<std::mutex> lock(allocations_mu);
  auto it = by_addr.find(alloc_addr);
  if (it == by_addr.end()) return;
  Allocation& a = it->second;
  if (--a.exports <= 0) {
    a.exports = 0;
    if (a.fd >= 0) ::close(a.fd);
    a.fd = -1;
  }
}
#endif

bool find(uint64_t addr, uint64_t len, Allocation* out) {
  std::lock_guard<std::mutex> lock(allocations_mu);
  auto it = by_addr.upper_bound(addr);
  if (it == by_addr.begin()) return false;
  --it;
  if (!te::range_within(it->second.addr, it->second.size, addr, len)) return false;
  *out = it->second;
  return true;
}

int exported_fd(uint64_t id, uint64_t* size) {
  std::lock_guard<std::mutex> lock(allocations_mu);
  for (auto& [addr, a] : by_addr) {
    if (a.id == id && a.exports > 0 && a.fd >= 0) {
      *size = a.size;
      return dup(a.fd);
    }
  }
  return -1;
}

size_t count() {
  std::lock_guard<std::mutex> lock(allocations_mu);
  return by_addr.size();
}

}  // namespace tenvl
