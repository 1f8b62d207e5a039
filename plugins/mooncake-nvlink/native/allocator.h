// The fabric-memory allocator of mooncake-nvlink (process-wide): cuMemCreate with
// exportable handle types (CU_MEM_HANDLE_TYPE_FABRIC and/or POSIX_FILE_DESCRIPTOR), sized
// to the allocation granularity, reserved, mapped and made accessible to its device.
// Registration accepts only memory from here.
#pragma once

#include <cstdint>
#include <string>

#include "te/cuda/errors.h"

namespace tenvl {

enum HandleTypes : int { kFabric = 1, kPosixFd = 2 };

struct Allocation {
  uint64_t id = 0;
  uint64_t addr = 0;
  uint64_t size = 0;       // granularity-aligned
  uint64_t requested = 0;  // what the caller asked for
  int device = 0;
  int handle_types = 0;
  uint64_t handle = 0;  // CUmemGenericAllocationHandle
  int exports = 0;      // live registrations
  int fd = -1;          // posix-fd export, while exported
};

te::cuda::Error allocate(int device, uint64_t bytes, int handle_types, Allocation* out);
/** Frees an allocation by its address; refused while registered. */
te::cuda::Error release(uint64_t addr);
/** The allocation holding [addr, addr+len), if one does. */
bool find(uint64_t addr, uint64_t len, Allocation* out);
/** Registration bookkeeping: counts exports, creates/closes the posix fd. */
te::cuda::Error add_export(uint64_t alloc_addr, bool posix_fd, Allocation* out);
void remove_export(uint64_t alloc_addr);
/** The exported fd of a live allocation id (dup'ed for sending is up to the caller); -1 if none. */
int exported_fd(uint64_t id, uint64_t* size);
size_t count();

}  // namespace tenvl
