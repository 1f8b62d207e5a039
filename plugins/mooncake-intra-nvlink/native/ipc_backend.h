// CUDA IPC backend of mooncake-intra-nvlink: exports cudaMalloc allocations with
// cudaIpcGetMemHandle (on the allocation base found with cuMemGetAddressRange) and opens
// peers' handles with cudaIpcOpenMemHandle.
#pragma once

#include "te/cuda/cuda_transport.h"

namespace teipc {

class IpcBackend : public te::cuda::Backend {
 public:
  const char* name() const override { return "cuda-ipc"; }
  te::cuda::Error export_region(uint64_t addr, uint64_t len, int device, te::cuda::ExportInfo* out) override;
  te::cuda::Error open(const te::cuda::PeerInfo& peer, const te::cuda::RemoteAlloc& alloc, int local_device,
                       te::cuda::Import* out) override;
  void close(te::cuda::Import& imp) override;
};

}  // namespace teipc
