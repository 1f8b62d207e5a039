#include "ipc_backend.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "te/cuda/device.h"
#include "te/cuda/driver.h"
#include "te/hex.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace teipc {

using te::cuda::Error;

using te::hex;

#if !TE_HAVE_CUDA

Error IpcBackend::export_region(uint64_t, uint64_t, int, te::cuda::ExportInfo*) {
  return Error::make(te::TE_NO_DEVICE, te::cuda::built_without_cuda_reason());
}
Error IpcBackend::open(const te::cuda::PeerInfo&, const te::cuda::RemoteAlloc&, int, te::cuda::Import*) {
  return Error::make(te::TE_NO_DEVICE, te::cuda::built_without_cuda_reason());
}
void IpcBackend::close(te::cuda::Import&) {}

#else

namespace {

// A handle may be opened once per process and device context: transports of one process
// share the mapping (counted), so two engines reaching one peer do not collide.
struct Opened {
  uint64_t ptr = 0;
  int refs = 0;
};
std::mutex opened_mu;
std::map<std::string, Opened> opened;  // key: device + handle bytes
std::map<uint64_t, std::string> key_of;

}  // namespace

Error IpcBackend::export_region(uint64_t addr, uint64_t len, int device, te::cuda::ExportInfo* out) {
  std::string why;
  const te::cuda::DriverApi* d = te::cuda::driver(&why);
  if (!d) return Error::make(te::TE_NO_DEVICE, "no CUDA device: " + why);
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(addr));
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Error::make(
        te::TE_MEMORY_KIND_UNSUPPORTED,
        hex(addr) + " is not CUDA device memory (" + te::cuda::runtime_error_text("cudaPointerGetAttributes", e) + ")");
  }
  if (attr.type != cudaMemoryTypeDevice)
    return Error::make(te::TE_MEMORY_KIND_UNSUPPORTED,
                       hex(addr) + " is not device memory (" +
                           (attr.type == cudaMemoryTypeHost      ? "pinned host"
                            : attr.type == cudaMemoryTypeManaged ? "managed"
                                                                 : "unregistered host") +
                           " memory): mooncake-intra-nvlink registers cudaMalloc memory only");
  if (attr.device != device)
    return Error::make(te::TE_INVALID_ARGUMENT, hex(addr) + " belongs to cuda:" + std::to_string(attr.device) +
                                                    ", not cuda:" + std::to_string(device));
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = d->cuMemGetAddressRange(&base, &size, static_cast<CUdeviceptr>(addr));
  if (r != CUDA_SUCCESS) return te::cuda::driver_error("cuMemGetAddressRange", r);
  if (!te::range_within(base, size, addr, len))
    return Error::make(te::TE_ADDRESS_OUT_OF_RANGE,
                       "range " + hex(addr) + "+" + std::to_string(len) + " reaches past its allocation " + hex(base) +
                           "+" + std::to_string(size) + " (one registration must lie in one cudaMalloc allocation)");
  cudaIpcMemHandle_t h;
  e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (e != cudaSuccess) {
    cudaGetLastError();
    Error err = Error::make(te::TE_MEMORY_KIND_UNSUPPORTED,
                            te::cuda::runtime_error_text("cudaIpcGetMemHandle", e) +
                                ": CUDA IPC shares cudaMalloc allocations only (not cuMemCreate / cudaMallocAsync pool "
                                "/ managed memory; use mooncake-nvlink for cuMem memory)");
    return err;
  }
  out->base = base;
  out->size = size;
  out->device = device;
  out->handle.assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof h);
  return Error::none();
}

Error IpcBackend::open(const te::cuda::PeerInfo& peer, const te::cuda::RemoteAlloc& alloc, int local_device,
                       te::cuda::Import* out) {
  cudaIpcMemHandle_t h;
  if (alloc.handle.size() != sizeof h)
    return Error::make(te::TE_INVALID_ARGUMENT, "segment " + peer.name + " published an IPC handle of " +
                                                    std::to_string(alloc.handle.size()) + " bytes (expected " +
                                                    std::to_string(sizeof h) + ")");
  memcpy(&h, alloc.handle.data(), sizeof h);
  std::string key = std::to_string(local_device) + ":";
  key.append(reinterpret_cast<const char*>(&h), sizeof h);
  std::lock_guard<std::mutex> lock(opened_mu);
  auto it = opened.find(key);
  if (it == opened.end()) {
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      // PEER_FAILED, not a per-request failure: the usual cause is an exporter that exited or
      // restarted, and this code makes the engine drop the cached descriptor and fetch it again.
      return Error::make(te::TE_PEER_FAILED, te::cuda::runtime_error_text("cudaIpcOpenMemHandle", e) +
                                                 " for allocation " + hex(alloc.base) + " of segment " + peer.name +
                                                 " (is it on this host, alive, and its GPU visible here?)");
    }
    it = opened.emplace(key, Opened{reinterpret_cast<uint64_t>(p), 0}).first;
    key_of[it->second.ptr] = key;
  }
  it->second.refs++;
  out->mapped = it->second.ptr;
  out->size = alloc.size;
  return Error::none();
}

void IpcBackend::close(te::cuda::Import& imp) {
  std::lock_guard<std::mutex> lock(opened_mu);
  auto k = key_of.find(imp.mapped);
  if (k == key_of.end()) return;
  auto it = opened.find(k->second);
  if (it != opened.end() && --it->second.refs <= 0) {
    cudaIpcCloseMemHandle(reinterpret_cast<void*>(imp.mapped));
    cudaGetLastError();
    opened.erase(it);
    key_of.erase(k);
  }
  imp.mapped = 0;
}

#endif

}  // namespace teipc
