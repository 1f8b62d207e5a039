// The checksummer's core without N-API: CRC32C against published vectors on both the
// instruction and the table path, continuation and combination, strided walks against a
// packed copy, bounds checks before any byte is read, and batches split across threads.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "checksum_batch.h"
#include "crc32c.h"
#include "te/status.h"

using te::staging::ChecksumJob;
using te::staging::CopyPool;

// A namespace of its own: the test sources of a package are compiled as one translation unit
// (native/scripts/compile-objects.sh), beside staging_core_test.cpp's helpers of the same names.
namespace checksum_tests {
namespace {

uint64_t addr(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

std::vector<uint8_t> patterned(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 13);
  return v;
}

void test_vectors() {
  // RFC 3720 (iSCSI) appendix B.4 and the common check value.
  const char* digits = "123456789";
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; i++) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  for (auto* f : {&te::staging::crc32c, &te::staging::crc32c_table}) {
    CHECK_EQ(f(0, digits, 9), 0xE3069283u);
    CHECK_EQ(f(0, zeros.data(), 32), 0x8A9136AAu);
    CHECK_EQ(f(0, ones.data(), 32), 0x62A8AB43u);
    CHECK_EQ(f(0, up.data(), 32), 0x46DD794Eu);
    CHECK_EQ(f(0, down.data(), 32), 0x113FDB5Cu);
    CHECK_EQ(f(0, digits, 0), 0u);
  }
  std::printf("crc32c: %s\n",
              te::staging::crc32c_hardware() ? "CPU instruction" : "table (no instruction on this CPU)");
}

void test_paths_agree_and_continue() {
  auto data = patterned(70000, 7);
  // Every alignment and a spread of lengths (around the three-stream blocks of 3 × 256 and
  // 3 × 8192 bytes too): the instruction path equals the table.
  for (size_t off = 0; off < 9; off++)
    for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 767u, 768u, 769u, 4095u, 24575u, 24576u, 24577u, 65536u})
      CHECK_EQ(te::staging::crc32c(0, data.data() + off, len), te::staging::crc32c_table(0, data.data() + off, len));
  // Continuing a CRC over a second range equals one CRC over both.
  uint32_t whole = te::staging::crc32c(0, data.data(), data.size());
  CHECK_EQ(te::staging::crc32c(te::staging::crc32c(0, data.data(), 12345), data.data() + 12345, data.size() - 12345),
           whole);
  // Combining two CRCs equals one CRC over both, without the bytes.
  for (size_t cut : {0u, 1u, 100u, 12345u, 69999u, 70000u}) {
    uint32_t a = te::staging::crc32c(0, data.data(), cut);
    uint32_t b = te::staging::crc32c(0, data.data() + cut, data.size() - cut);
    CHECK_EQ(te::staging::crc32c_combine(a, b, data.size() - cut), whole);
  }
}

void test_strided_walk() {
  // An NHD head slice: 16 token rows of 2 heads × 32 B out of rows of 8 heads, and an HND
  // one: 4 reps (heads) of 16 rows of 32 B. Each equals the CRC of the slice packed.
  auto page = patterned(16 * 8 * 32 * 4, 3);
  ChecksumJob nhd{addr(page.data()) + 3 * 32, 64, 16, 8 * 32, 1, 0};
  std::vector<uint8_t> packed;
  for (int t = 0; t < 16; t++) packed.insert(packed.end(), page.begin() + t * 256 + 96, page.begin() + t * 256 + 160);
  CHECK_EQ(te::staging::checksum_job(nhd), te::staging::crc32c(0, packed.data(), packed.size()));
  ChecksumJob hnd{addr(page.data()) + 40, 32, 16, 64, 4, 2048};
  packed.clear();
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 16; i++)
      packed.insert(packed.end(), page.begin() + 40 + r * 2048 + i * 64, page.begin() + 40 + r * 2048 + i * 64 + 32);
  CHECK_EQ(te::staging::checksum_job(hnd), te::staging::crc32c(0, packed.data(), packed.size()));
  ChecksumJob none{addr(page.data()), 0, 1, 0, 1, 0};
  CHECK_EQ(te::staging::checksum_job(none), 0u);
}

void test_bounds() {
  std::vector<uint8_t> mem(3 * 4096);
  auto regions = te::staging::merge_regions({{addr(mem.data()), 4096}, {addr(mem.data()) + 8192, 4096}});
  std::string why;
  ChecksumJob ok{addr(mem.data()), 128, 8, 512, 1, 0};
  CHECK_EQ(te::staging::check_checksum_jobs({ok}, regions, why), te::TE_OK);
  ChecksumJob past = ok;
  past.rows = 9;  // the last row ends at 8*512+128 > 4096
  CHECK_EQ(te::staging::check_checksum_jobs({ok, past}, regions, why), te::TE_ADDRESS_OUT_OF_RANGE);
  CHECK(why.find("checksum 1") != std::string::npos);
  ChecksumJob gap{addr(mem.data()) + 4000, 200, 1, 200, 1, 0};  // runs into the gap between the regions
  CHECK_EQ(te::staging::check_checksum_jobs({gap}, regions, why), te::TE_ADDRESS_OUT_OF_RANGE);
  ChecksumJob overflow = ok;
  overflow.rows = UINT64_MAX / 2;
  CHECK_EQ(te::staging::check_checksum_jobs({overflow}, regions, why), te::TE_INVALID_ARGUMENT);
  ChecksumJob empty{0, 0, 0, 0, 0, 0};
  CHECK_EQ(te::staging::check_checksum_jobs({empty}, regions, why), te::TE_OK);
}

void test_batches(size_t threads) {
  auto data = patterned(3 << 20, 11);
  CopyPool pool(threads);
  std::vector<ChecksumJob> jobs;
  // Pages of 16 KiB, strided slices of them, and one range of 2 MiB the batch cuts into parts.
  for (uint64_t p = 0; p < 32; p++) jobs.push_back({addr(data.data()) + p * 16384, 16384, 1, 16384, 1, 0});
  for (uint64_t p = 0; p < 32; p++)
    jobs.push_back({addr(data.data()) + 524288 + p * 8192, 64, 16, 256, 4, 64});  // reps overlap: reading twice is fine
  // Strided rows of an odd width (the lockstep walk's byte tails), and one of another shape between them.
  for (uint64_t p = 0; p < 7; p++) jobs.push_back({addr(data.data()) + 700000 + p * 4096, 61, 9, 200, 2, 2000});
  jobs.push_back({addr(data.data()) + 800000, 24, 5, 100, 1, 0});
  for (uint64_t p = 0; p < 4; p++) jobs.push_back({addr(data.data()) + 900000 + p * 4096, 61, 9, 200, 2, 2000});
  jobs.push_back({addr(data.data()) + (1 << 20), 2 << 20, 1, 2 << 20, 1, 0});
  jobs.push_back({addr(data.data()), 0, 0, 0, 0, 0});
  for (uint64_t split : {uint64_t{1} << 20, uint64_t{100000}, uint64_t{4096}}) {
    std::vector<uint32_t> got = te::staging::checksum_jobs(pool, jobs, split);
    CHECK_EQ(got.size(), jobs.size());
    for (size_t k = 0; k < jobs.size(); k++) CHECK_EQ(got[k], te::staging::checksum_job(jobs[k]));
  }
  CHECK(te::staging::checksum_jobs(pool, {}).empty());
  // The three-walk lockstep against three single walks, odd width and reps.
  const uint8_t* base[3] = {data.data() + 11, data.data() + 5000, data.data() + 20003};
  uint32_t three[3];
  te::staging::crc32c_strided3(base, 61, 9, 200, 3, 2000, three);
  for (int k = 0; k < 3; k++) CHECK_EQ(three[k], te::staging::checksum_job({addr(base[k]), 61, 9, 200, 3, 2000}));
}

}  // namespace
}  // namespace checksum_tests

void run_checksum_tests() {
  checksum_tests::test_vectors();
  checksum_tests::test_paths_agree_and_continue();
  checksum_tests::test_strided_walk();
  checksum_tests::test_bounds();
  for (size_t t : {1, 2, 4}) checksum_tests::test_batches(t);
}
