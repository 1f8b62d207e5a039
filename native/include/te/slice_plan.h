// Batch planning: requests larger than the slice size are cut into slices, and slices are
// spread over a peer's lanes (connections) so large requests use every lane and small
// ones are balanced by bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace te {

struct SlicePlan {
  uint32_t request;  // index in the batch
  uint32_t lane;     // which lane carries it
  uint64_t offset;   // byte offset inside the request
  uint64_t length;   // bytes in this slice (> 0)
};

/** Per-slice cost in bytes added when balancing, so many tiny slices still spread over lanes. */
constexpr uint64_t kSliceOverheadBytes = 512;

/**
 * Plans the slices of `n` requests of `lengths` bytes: each request is cut into
 * ceil(len / slice_size) slices (zero-length requests get none), each assigned to the
 * least-loaded of `lanes` lanes (ties go to the next lane after the previous choice,
 * starting at `first_lane`). Slices of a request are emitted in offset order.
 */
std::vector<SlicePlan> plan_slices(const uint64_t* lengths, size_t n, uint64_t slice_size, uint32_t lanes,
                                   uint32_t first_lane = 0);

/** Number of slices plan_slices() would produce (for sizing). */
size_t count_slices(const uint64_t* lengths, size_t n, uint64_t slice_size);

}  // namespace te
