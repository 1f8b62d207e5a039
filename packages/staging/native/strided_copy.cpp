#include "strided_copy.h"

#include <algorithm>
#include <cstring>

#include "te/hex.h"
#include "te/status.h"
#include "te/streaming_copy.h"

namespace te::staging {

namespace {

// Rows narrower than this are written with streaming stores (te/streaming_copy.h): their
// destinations (KV pages a ring scatters into, staging memory the transport sends from
// later) are not read by this thread again, and an ordinary copy would read every
// destination line first.
constexpr uint64_t kStreamingRowWidth = 4096;

// a * b + c without wrapping; false when it would not fit in 64 bits.
bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t& out) {
  if (a != 0 && b > (UINT64_MAX - c) / a) return false;
  out = a * b + c;
  return true;
}

}  // namespace

bool strided_span(uint64_t width, uint64_t rows, uint64_t pitch, uint64_t reps, uint64_t rep_stride, uint64_t& span) {
  uint64_t a = 0;
  uint64_t b = 0;
  if (!mul_add(reps - 1, rep_stride, 0, a) || !mul_add(rows - 1, pitch, width, b)) return false;
  if (a > UINT64_MAX - b) return false;
  span = a + b;
  return true;
}

bool inside_regions(const std::vector<Region>& regions, uint64_t first, uint64_t end) {
  auto it =
      std::upper_bound(regions.begin(), regions.end(), first, [](uint64_t a, const Region& r) { return a < r.base; });
  if (it == regions.begin()) return false;
  --it;
  return first >= it->base && end <= it->base + it->length;
}

Extent source_extent(const CopyJob& j) {
  uint64_t span = 0;
  if (j.bytes() == 0 || !strided_span(j.width, j.rows, j.src_pitch, j.reps, j.src_rep_stride, span)) return {0, 0};
  return {j.src, j.src + span};
}

Extent destination_extent(const CopyJob& j) {
  uint64_t span = 0;
  if (j.bytes() == 0 || !strided_span(j.width, j.rows, j.dst_pitch, j.reps, j.dst_rep_stride, span)) return {0, 0};
  return {j.dst, j.dst + span};
}

std::vector<Region> merge_regions(std::vector<Region> regions) {
  std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.base < b.base; });
  std::vector<Region> out;
  for (const Region& r : regions) {
    if (r.length == 0 || r.base > UINT64_MAX - r.length) continue;
    if (!out.empty() && r.base <= out.back().base + out.back().length) {
      uint64_t end = std::max(out.back().base + out.back().length, r.base + r.length);
      out.back().length = end - out.back().base;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

int32_t check_jobs(const std::vector<CopyJob>& jobs, const std::vector<Region>& regions, std::string& message) {
  for (size_t i = 0; i < jobs.size(); i++) {
    const CopyJob& j = jobs[i];
    if (j.width == 0 || j.rows == 0 || j.reps == 0) continue;  // moves nothing
    uint64_t src_span = 0;
    uint64_t dst_span = 0;
    if (!strided_span(j.width, j.rows, j.src_pitch, j.reps, j.src_rep_stride, src_span) ||
        !strided_span(j.width, j.rows, j.dst_pitch, j.reps, j.dst_rep_stride, dst_span) ||
        j.src > UINT64_MAX - src_span || j.dst > UINT64_MAX - dst_span) {
      message = "copy " + std::to_string(i) + ": its extent overflows 64 bits";
      return TE_INVALID_ARGUMENT;
    }
    // Rows of one side must not overlap each other, or the result would depend on order.
    if ((j.rows > 1 && (j.src_pitch < j.width || j.dst_pitch < j.width)) ||
        (j.reps > 1 && j.rows == 1 && (j.src_rep_stride < j.width || j.dst_rep_stride < j.width))) {
      message = "copy " + std::to_string(i) + ": a pitch is smaller than the row width";
      return TE_INVALID_ARGUMENT;
    }
    if (!inside_regions(regions, j.src, j.src + src_span)) {
      message = "copy " + std::to_string(i) + ": source [" + te::hex(j.src) + ", +" + std::to_string(src_span) +
                ") is outside the registered buffers";
      return TE_ADDRESS_OUT_OF_RANGE;
    }
    if (!inside_regions(regions, j.dst, j.dst + dst_span)) {
      message = "copy " + std::to_string(i) + ": destination [" + te::hex(j.dst) + ", +" + std::to_string(dst_span) +
                ") is outside the registered buffers";
      return TE_ADDRESS_OUT_OF_RANGE;
    }
  }
  return TE_OK;
}

void run_jobs(const CopyJob* jobs, size_t begin, size_t end) {
  for (size_t k = begin; k < end; k++) {
    const CopyJob& j = jobs[k];
    for (uint64_t r = 0; r < j.reps; r++) {
      auto* s = reinterpret_cast<const unsigned char*>(j.src + r * j.src_rep_stride);
      auto* d = reinterpret_cast<unsigned char*>(j.dst + r * j.dst_rep_stride);
      if (j.rows == 1 || (j.src_pitch == j.width && j.dst_pitch == j.width)) {
        std::memcpy(d, s, j.width * j.rows);
        continue;
      }
      if (j.width < kStreamingRowWidth) {
        for (uint64_t i = 0; i < j.rows; i++) te::streaming_copy(d + i * j.dst_pitch, s + i * j.src_pitch, j.width);
      } else {
        for (uint64_t i = 0; i < j.rows; i++) std::memcpy(d + i * j.dst_pitch, s + i * j.src_pitch, j.width);
      }
    }
  }
  te::streaming_fence();  // the copies are in memory before the batch reports done
}

std::vector<size_t> partition_by_bytes(const std::vector<CopyJob>& jobs, size_t parts) {
  std::vector<size_t> bounds{0};
  if (parts == 0) parts = 1;
  uint64_t total = 0;
  for (const CopyJob& j : jobs) total += j.bytes();
  const uint64_t share = total / parts + 1;
  uint64_t acc = 0;
  for (size_t i = 0; i < jobs.size(); i++) {
    acc += jobs[i].bytes();
    if (acc >= share * bounds.size() && bounds.size() < parts && i + 1 < jobs.size()) bounds.push_back(i + 1);
  }
  bounds.push_back(jobs.size());
  return bounds;
}

}  // namespace te::staging
