// Batches of CRC32C checksums over strided host memory, the end-to-end integrity check of
// te's KV transfers: one checksum per job, over the bytes the job walks in order (for
// r < reps, for i < rows: `width` bytes at addr + r·rep_stride + i·pitch). A head slice of
// a page is such a walk on either side of a transfer (a strided copy's source or
// destination side), so both ends can checksum the same bytes without gathering them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "copy_pool.h"
#include "strided_copy.h"

namespace te::staging {

/** One checksum: CRC32C of the strided walk. */
struct ChecksumJob {
  uint64_t addr;
  uint64_t width;
  uint64_t rows;
  uint64_t pitch;
  uint64_t reps;
  uint64_t rep_stride;

  uint64_t bytes() const { return width * rows * reps; }
};

/** Doubles per job in the flat array the addon receives. */
constexpr size_t kChecksumFields = 6;

/**
 * Checks every job before any byte is read: its extent lies inside one region of `regions`
 * (from merge_regions) and no arithmetic overflows. Returns 0, or a te status
 * (ADDRESS_OUT_OF_RANGE, INVALID_ARGUMENT) with `message` naming the job and the address.
 */
int32_t check_checksum_jobs(const std::vector<ChecksumJob>& jobs, const std::vector<Region>& regions,
                            std::string& message);

/** CRC32C of one job's walk, on the calling thread. */
uint32_t checksum_job(const ChecksumJob& j);

/**
 * Every job's CRC32C, the work spread over `pool`'s threads by bytes: a job larger than
 * `split` bytes that is one contiguous range is cut into parts checksummed apart and
 * combined (crc32c_combine), so one large item keeps every thread busy too.
 */
std::vector<uint32_t> checksum_jobs(CopyPool& pool, const std::vector<ChecksumJob>& jobs,
                                    uint64_t split = uint64_t{1} << 20);

}  // namespace te::staging
