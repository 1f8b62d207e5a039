#include "te/slice_plan.h"

namespace te {

size_t count_slices(const uint64_t* lengths, size_t n, uint64_t slice_size) {
  if (slice_size == 0) slice_size = 1;
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += static_cast<size_t>(lengths[i] / slice_size + (lengths[i] % slice_size != 0));
  return total;
}

std::vector<SlicePlan> plan_slices(const uint64_t* lengths, size_t n, uint64_t slice_size, uint32_t lanes,
                                   uint32_t first_lane) {
  if (slice_size == 0) slice_size = 1;
  if (lanes == 0) lanes = 1;
  std::vector<SlicePlan> out;
  out.reserve(count_slices(lengths, n, slice_size));
  std::vector<uint64_t> load(lanes, 0);
  uint32_t cursor = first_lane % lanes;
  for (size_t i = 0; i < n; ++i) {
    for (uint64_t off = 0; off < lengths[i];) {
      uint64_t len = lengths[i] - off < slice_size ? lengths[i] - off : slice_size;
      // Least-loaded lane, scanning from the cursor so ties rotate.
      uint32_t best = cursor;
      for (uint32_t k = 1; k < lanes; ++k) {
        uint32_t l = (cursor + k) % lanes;
        if (load[l] < load[best]) best = l;
      }
      load[best] += len + kSliceOverheadBytes;
      cursor = (best + 1) % lanes;
      out.push_back(SlicePlan{static_cast<uint32_t>(i), best, off, len});
      off += len;
    }
  }
  return out;
}

}  // namespace te
