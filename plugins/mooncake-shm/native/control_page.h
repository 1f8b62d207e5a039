// The control page of one connection: a sealed 4 KiB memfd the initiator creates and passes
// to the target in HELLO (SCM_RIGHTS); both map it shared. It is the fence that lets an
// initiator settle a batch even when the target stopped answering: the target copies only
// between announcing itself busy and checking `revoked`, the initiator sets `revoked` and
// then waits until no copy thread is busy (Dekker's protocol on seq_cst atomics).
//
//   target copy thread i:  busy[i] = 1;  if (revoked) skip; else copy;  busy[i] = 0
//   initiator:             revoked = 1;  wait until every busy[i] == 0
//
// Whichever store comes first in the single total order, either the target sees `revoked`
// or the initiator sees `busy`: no copy starts after the initiator's wait ended.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "te/status.h"

namespace teshm {

constexpr size_t kControlPageSize = 4096;
constexpr uint32_t kMaxCopyThreads = 64;
constexpr uint64_t kControlMagic = 0x4c5443485345544eull;

struct ControlPage {
  uint64_t magic;
  std::atomic<uint32_t> revoked;
  uint32_t pad;
  std::atomic<uint32_t> busy[kMaxCopyThreads];
};
static_assert(sizeof(ControlPage) <= kControlPageSize, "control page fits one page");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "cross-process atomics must be lock-free");

/** Initiator: a sealed memfd holding a zeroed control page, mapped at *page. */
te::Status create_control_page(int* fd, ControlPage** page, std::string* err);
/**
 * Target: maps a peer's control page after checking it is a memfd of exactly one page that
 * can neither shrink nor grow (a peer truncating it would otherwise SIGBUS this process).
 */
te::Status map_control_page(int fd, ControlPage** page, std::string* err);
void unmap_control_page(ControlPage* page);

/** Initiator side of the fence: after it returns true, no copy of this connection starts. */
inline void revoke(ControlPage* p) { p->revoked.store(1, std::memory_order_seq_cst); }
inline bool quiescent(const ControlPage* p, uint32_t threads) {
  for (uint32_t i = 0; i < threads && i < kMaxCopyThreads; ++i)
    if (p->busy[i].load(std::memory_order_seq_cst) != 0) return false;
  return true;
}

/** Target side: enter() false means the connection was revoked and nothing may be copied. */
inline bool enter(ControlPage* p, uint32_t slot) {
  p->busy[slot].store(1, std::memory_order_seq_cst);
  if (p->revoked.load(std::memory_order_seq_cst) != 0) {
    p->busy[slot].store(0, std::memory_order_seq_cst);
    return false;
  }
  return true;
}
inline void leave(ControlPage* p, uint32_t slot) { p->busy[slot].store(0, std::memory_order_seq_cst); }

}  // namespace teshm
