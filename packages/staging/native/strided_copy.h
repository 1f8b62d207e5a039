// Strided copies between host buffers, the staging gather/scatter of heterogeneous-TP KV:
// a head slice of a page is `reps` blocks of `rows` rows of `width` bytes, at pitches that
// differ on the two sides (NHD vs HND, heads per rank, tokens per page).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace te::staging {

/** One 3-level strided copy: for r < reps, for i < rows: copy width bytes. */
struct CopyJob {
  uint64_t src;
  uint64_t dst;
  uint64_t width;
  uint64_t rows;
  uint64_t src_pitch;
  uint64_t dst_pitch;
  uint64_t reps;
  uint64_t src_rep_stride;
  uint64_t dst_rep_stride;

  uint64_t bytes() const { return width * rows * reps; }
};

/** Doubles per job in the flat array the addon receives. */
constexpr size_t kJobFields = 9;

/** [base, base + length): memory a job may read or write. */
struct Region {
  uint64_t base;
  uint64_t length;
};

/** Extent [first, end) a job touches on one side (0, 0 when it moves no byte). */
struct Extent {
  uint64_t first;
  uint64_t end;
};

Extent source_extent(const CopyJob& j);
Extent destination_extent(const CopyJob& j);

/** Bytes from a strided side's first byte to one past its last: (reps-1)*rep_stride + (rows-1)*pitch + width; false on
 * overflow. */
bool strided_span(uint64_t width, uint64_t rows, uint64_t pitch, uint64_t reps, uint64_t rep_stride, uint64_t& span);

/** Whether [first, end) lies inside one region of `regions` (sorted and disjoint, from merge_regions). */
bool inside_regions(const std::vector<Region>& regions, uint64_t first, uint64_t end);

/** Sorted, disjoint union of `regions` (overlapping or touching ones joined), as check_jobs wants them. */
std::vector<Region> merge_regions(std::vector<Region> regions);

/**
 * Checks every job before any byte moves: each side's extent lies inside one region of
 * `regions` (from merge_regions), and
 * no arithmetic overflows. Returns 0, or a te status (ADDRESS_OUT_OF_RANGE,
 * INVALID_ARGUMENT) with `message` naming the job and the address.
 */
int32_t check_jobs(const std::vector<CopyJob>& jobs, const std::vector<Region>& regions, std::string& message);

/** Runs jobs [begin, end) on the calling thread. */
void run_jobs(const CopyJob* jobs, size_t begin, size_t end);

/**
 * Splits jobs into at most `parts` contiguous ranges of about equal bytes (a large job is
 * not split: callers emit jobs of a page or less). Returns part boundaries, parts + 1 long.
 */
std::vector<size_t> partition_by_bytes(const std::vector<CopyJob>& jobs, size_t parts);

}  // namespace te::staging
