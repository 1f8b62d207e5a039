// Pool memory: host memory that mooncake-shm allocates from a sealed memfd
// (engine.allocateMemory). An initiator hands the memfd to each target it copies with; the
// target maps it and moves a request on pool memory with memcpy, at memory speed, instead
// of process_vm_readv/writev, which pins and maps every page of both ranges per call.
// Ordinary registered memory keeps using process_vm_* (copy.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "te/status.h"

namespace teshm {

/** One allocation of this process: the mapping and its memfd live as long as the last holder. */
struct LocalPool {
  uint32_t id = 0;
  uint64_t base = 0;
  uint64_t len = 0;
  int fd = -1;
  ~LocalPool();
};

/**
 * This process's pool allocations. A holder of a LocalPool (the table until free, the JS
 * view until it is collected, an announcement not yet sent) keeps the memory mapped, so a
 * JS view used after free never faults.
 */
class LocalPools {
 public:
  /** memfd_create, sealed against shrinking (a target that maps it can never fault), mapped shared. */
  te::Status allocate(uint64_t len, std::shared_ptr<LocalPool>* out, std::string* err);
  /** Removes the allocation at `base` from the table; nullptr when none starts there. */
  std::shared_ptr<LocalPool> release(uint64_t base);
  /** The allocation holding all of [addr, addr+len), or nullptr. */
  std::shared_ptr<LocalPool> find(uint64_t addr, uint64_t len) const;

 private:
  mutable std::mutex mu_;
  uint32_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<LocalPool>> by_base_;
};

/** An initiator's pool as a target mapped it. */
struct PeerPool {
  uint64_t base = 0;  // in the initiator's address space
  uint64_t len = 0;
  uint8_t* map = nullptr;  // in this process
  ~PeerPool();
  /** This process's address of initiator address `addr` (a range the caller checked with holds()). */
  uint8_t* at(uint64_t addr) const { return map + (addr - base); }
  bool holds(uint64_t addr, uint64_t n) const { return addr >= base && n <= len && addr - base <= len - n; }
};

/**
 * Maps an initiator's pool memfd. Refused (with `why`) unless it is a memfd sealed against
 * shrinking and at least `ad_len` long: a file the initiator could truncate would turn this
 * process's copies into SIGBUS.
 */
te::Status map_peer_pool(int fd, uint64_t base, uint64_t ad_len, std::shared_ptr<PeerPool>* out, std::string* why);

/** Initiators' pools mapped in this process now (diagnostics). */
uint64_t peer_pools_mapped();

}  // namespace teshm
