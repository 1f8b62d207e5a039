// cuMem VMM backend of mooncake-nvlink: registration exports allocations of the fabric
// allocator (fabric handle bytes in the descriptor, or a POSIX fd served on a unix socket);
// a peer imports the handle, reserves an address range, maps it and grants its device access.
#pragma once

#include <string>

#include "allocator.h"
#include "te/cuda/cuda_transport.h"

namespace tenvl {

class VmmBackend : public te::cuda::Backend {
 public:
  /** `handle_type`: kFabric or kPosixFd. Starts the fd server for posix-fd. */
  VmmBackend(int handle_type, int fetch_timeout_ms);
  ~VmmBackend() override;
  const char* name() const override { return handle_type_ == kFabric ? "cumem-fabric" : "cumem-posix-fd"; }
  te::cuda::Error start();
  const std::string& socket_name() const { return socket_; }
  te::cuda::Error export_region(uint64_t addr, uint64_t len, int device, te::cuda::ExportInfo* out) override;
  void unexport(const te::cuda::ExportInfo& info) override;
  te::cuda::Error open(const te::cuda::PeerInfo& peer, const te::cuda::RemoteAlloc& alloc, int local_device,
                       te::cuda::Import* out) override;
  te::cuda::Error grant(te::cuda::Import& imp, int local_device) override;
  void close(te::cuda::Import& imp) override;
  void stop() override;

 private:
  int handle_type_;
  int fetch_timeout_ms_;
  bool server_ = false;
  std::string socket_;
};

}  // namespace tenvl
