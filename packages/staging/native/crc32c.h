// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of te's end-to-end KV
// and EC integrity checks: the CPU's crc32 instruction where it has one (SSE4.2 on x86-64,
// the CRC extension on AArch64), else a table-driven loop (slicing by 8).
#pragma once

#include <cstddef>
#include <cstdint>

namespace te::staging {

/** CRC32C of `n` bytes at `data`, continuing `crc` (0 to start; the result of a previous call to go on). */
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

/** The table-driven CRC32C, whatever the CPU has (the reference the instruction path is tested against). */
uint32_t crc32c_table(uint32_t crc, const void* data, size_t n);

/**
 * CRC32C of three strided walks of one shape at once (for r < reps, for i < rows: `width`
 * bytes at base[k] + r·rep_stride + i·pitch), into out[0..2]: three independent streams keep
 * the instruction busy where one walk's short rows would leave it waiting on its latency.
 */
void crc32c_strided3(const uint8_t* const base[3], uint64_t width, uint64_t rows, uint64_t pitch, uint64_t reps,
                     uint64_t rep_stride, uint32_t out[3]);

/** Whether crc32c() uses the CPU's instruction here. */
bool crc32c_hardware();

/**
 * CRC32C of A followed by B from crc(A), crc(B) and B's length, without touching the bytes:
 * O(log len_b) (zlib's crc32_combine method over the Castagnoli polynomial).
 */
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace te::staging
