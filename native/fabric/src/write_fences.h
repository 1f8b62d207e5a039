// Delivery of writes proven by one write per batch and rail.
//
// A completed te write means the bytes are applied at the target, which libfabric gives per
// operation with FI_DELIVERY_COMPLETE: the target acknowledges each write, and on
// tcp;ofi_rxm that costs 15-30% of the throughput of plain writes. Where the provider
// places writes to one peer in the order they were posted (FI_ORDER_WAW, for sizes up to
// max_order_waw_size), the delivery of a later write proves every earlier one landed. So
// a batch's writes on a rail are posted plainly except its last one (the fence), which asks
// for delivery completion; a plain write whose local completion arrives (its data left) is
// held until its batch's fence is delivered, and only then reported done.
//
// If the fence fails or is never posted (the batch was cancelled, the peer broke, the
// region was revoked), the held writes are reported with that failure: they may have
// landed, but nothing proves it, and te never reports success for unproven bytes.
//
// Rail thread only: posting and completions both run there, so no lock.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace te::fabric {

struct Batch;
struct Op;

/**
 * Marks the fence among one batch's slices on a rail (in posting order; each has `write`,
 * `len` and `fence`): the last write of at most `max_ordered` bytes. The provider orders
 * writes only up to that size, so a larger fence's delivery proves nothing about the writes
 * before it; writes larger than it are posted delivery-complete anyway and need no fence.
 * Returns the index marked, or -1 (no write of an ordered size).
 */
template <class Slices>
long mark_fence(Slices& slices, uint64_t max_ordered) {
  for (size_t i = slices.size(); i-- > 0;) {
    if (slices[i].write && slices[i].len <= max_ordered) {
      slices[i].fence = true;
      return static_cast<long>(i);
    }
  }
  return -1;
}

class WriteFences {
 public:
  /** What a plain write's local completion turned into. */
  struct Outcome {
    bool held = false;  // kept until the fence resolves; nothing to report now
    int32_t status = 0;
    std::string why;
  };

  /** A plain write of `b` was posted: it waits for `b`'s fence on this rail. */
  void posted_plain(const Batch* b) { ++by_batch_[b].outstanding; }

  /** The provider finished a plain write locally (`status` 0: its data left). */
  Outcome plain_done(Op* op, const Batch* b, int32_t status);

  /**
   * The fence of `b` was delivered (status 0), failed, or will never be posted. The writes
   * held for it are appended to `released` with the status to report them with.
   */
  void fence_done(const Batch* b, int32_t status, const std::string& why,
                  std::vector<std::pair<Op*, Outcome>>& released);

  /** Writes still held (the rail deletes them at close). */
  std::vector<Op*> drain_all();

  size_t batches() const { return by_batch_.size(); }

 private:
  struct Entry {
    int outstanding = 0;  // posted plain writes not finished locally
    std::vector<Op*> held;
    bool resolved = false;
    int32_t status = 0;
    std::string why;
  };
  void forget_if_done(std::unordered_map<const Batch*, Entry>::iterator it);
  std::unordered_map<const Batch*, Entry> by_batch_;
};

}  // namespace te::fabric
