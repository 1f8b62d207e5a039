#include "vmm_backend.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "fd_server.h"
#include "te/cuda/device.h"
#include "te/cuda/driver.h"
#include "te/hex.h"

namespace tenvl {

using te::hex;
using te::cuda::Error;

VmmBackend::VmmBackend(int handle_type, int fetch_timeout_ms)
    : handle_type_(handle_type), fetch_timeout_ms_(fetch_timeout_ms) {}

VmmBackend::~VmmBackend() { stop(); }

void VmmBackend::stop() {
  if (server_) fd_server_release();
  server_ = false;
}

Error VmmBackend::start() {
  if (handle_type_ != kPosixFd || server_) return Error::none();
  Error e = fd_server_acquire(&socket_);
  server_ = e.ok();
  return e;
}

Error VmmBackend::export_region(uint64_t addr, uint64_t len, int device, te::cuda::ExportInfo* out) {
  Allocation a;
  if (!find(addr, len, &a)) {
    return Error::make(
        te::TE_MEMORY_KIND_UNSUPPORTED,
        "memory at " + hex(addr) + "+" + std::to_string(len) +
            " was not allocated by allocateFabricMemory() of @te/mooncake-nvlink (or reaches past its allocation): "
            "mooncake-nvlink registers only memory from its own allocator (cuMemCreate with exportable handles); "
            "use mooncake-intra-nvlink for cudaMalloc memory");
  }
  if (a.device != device)
    return Error::make(te::TE_INVALID_ARGUMENT, hex(addr) + " was allocated on cuda:" + std::to_string(a.device) +
                                                    ", not cuda:" + std::to_string(device));
  if (!(a.handle_types & handle_type_))
    return Error::make(te::TE_INVALID_ARGUMENT,
                       std::string("memory at ") + hex(addr) + " was allocated without " +
                           (handle_type_ == kFabric ? "fabric" : "posix-fd") +
                           " handles, which this transport exports (allocate with the same handleType)");
#if TE_HAVE_CUDA
  Allocation cur;
  Error e = add_export(a.addr, handle_type_ == kPosixFd, &cur);
  if (!e.ok()) return e;
  out->base = cur.addr;
  out->size = cur.size;
  out->device = cur.device;
  out->alloc_id = cur.id;
  if (handle_type_ == kFabric) {
    CUmemFabricHandle fh;
    CUresult r = te::cuda::driver()->cuMemExportToShareableHandle(
        &fh, static_cast<CUmemGenericAllocationHandle>(cur.handle), CU_MEM_HANDLE_TYPE_FABRIC, 0);
    if (r != CUDA_SUCCESS) {
      remove_export(cur.addr);
      return te::cuda::driver_error("cuMemExportToShareableHandle(FABRIC)", r);
    }
    out->handle.assign(fh.data, fh.data + sizeof fh.data);
  }
  return Error::none();
#else
  return Error::make(te::TE_NO_DEVICE, te::cuda::built_without_cuda_reason());
#endif
}

void VmmBackend::unexport(const te::cuda::ExportInfo& info) {
  if (info.base != 0) remove_export(info.base);
}

#if TE_HAVE_CUDA
Error VmmBackend::open(const te::cuda::PeerInfo& peer, const te::cuda::RemoteAlloc& alloc, int local_device,
                       te::cuda::Import* out) {
  std::string why;
  const te::cuda::DriverApi* d = te::cuda::driver(&why);
  if (!d) return Error::make(te::TE_NO_DEVICE, "no CUDA device: " + why);
  CUmemGenericAllocationHandle h = 0;
  CUresult r;
  if (alloc.handle.size() == sizeof(CUmemFabricHandle)) {
    CUmemFabricHandle fh;
    memcpy(fh.data, alloc.handle.data(), sizeof fh.data);
    r = d->cuMemImportFromShareableHandle(&h, &fh, CU_MEM_HANDLE_TYPE_FABRIC);
    if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemImportFromShareableHandle(FABRIC)", r);
  } else {
    int fd = -1;
    uint64_t size = 0;
    Error e = fetch_fd(peer.socket, alloc.alloc_id, fetch_timeout_ms_, &fd, &size);
    if (!e.ok()) return e;
    if (size != alloc.size) {
      ::close(fd);
      return Error::make(te::TE_STALE_DESCRIPTOR,
                         "allocation " + std::to_string(alloc.alloc_id) + " of segment " + peer.name + " changed size");
    }
    r = d->cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ::close(fd);
    if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemImportFromShareableHandle(POSIX_FILE_DESCRIPTOR)", r);
  }
  CUdeviceptr ptr = 0;
  r = d->cuMemAddressReserve(&ptr, alloc.size, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    d->cuMemRelease(h);
    return te::cuda::driver_error("cuMemAddressReserve", r);
  }
  r = d->cuMemMap(ptr, alloc.size, 0, h, 0);
  d->cuMemRelease(h);  // the mapping keeps the allocation alive
  if (r != CUDA_SUCCESS) {
    d->cuMemAddressFree(ptr, alloc.size);
    return te::cuda::driver_error("cuMemMap", r);
  }
  out->mapped = ptr;
  out->size = alloc.size;
  out->access_mask = 0;
  Error e = grant(*out, local_device);
  if (!e.ok()) {
    d->cuMemUnmap(ptr, alloc.size);
    d->cuMemAddressFree(ptr, alloc.size);
    out->mapped = 0;
  }
  return e;
}

Error VmmBackend::grant(te::cuda::Import& imp, int local_device) {
  const uint64_t bit = local_device < 64 ? (uint64_t{1} << local_device) : 0;
  if (imp.access_mask & bit) return Error::none();
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = local_device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUresult r = te::cuda::driver()->cuMemSetAccess(imp.mapped, imp.size, &access, 1);
  if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemSetAccess", r);
  imp.access_mask |= bit;
  return Error::none();
}

void VmmBackend::close(te::cuda::Import& imp) {
  const te::cuda::DriverApi* d = te::cuda::driver();
  if (!d || imp.mapped == 0) return;
  d->cuMemUnmap(imp.mapped, imp.size);
  d->cuMemAddressFree(imp.mapped, imp.size);
  imp.mapped = 0;
}
#else
Error VmmBackend::open(const te::cuda::PeerInfo&, const te::cuda::RemoteAlloc&, int, te::cuda::Import*) {
  return Error::make(te::TE_NO_DEVICE, te::cuda::built_without_cuda_reason());
}
Error VmmBackend::grant(te::cuda::Import&, int) { return Error::none(); }
void VmmBackend::close(te::cuda::Import&) {}
#endif

}  // namespace tenvl
