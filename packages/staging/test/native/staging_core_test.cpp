// The staging copier's core without N-API: bounds checks before any byte moves, strided
// copies against a byte-by-byte reference, and the pool splitting a batch across threads;
// the checksummer's tests are in checksum_test.cpp.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "check.h"
#include "copy_pool.h"
#include "strided_copy.h"
#include "te/status.h"

using te::staging::CopyJob;
using te::staging::CopyPool;
using te::staging::Region;

namespace {

uint64_t addr(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// Byte-by-byte reference of one job.
void reference(const CopyJob& j) {
  for (uint64_t r = 0; r < j.reps; r++)
    for (uint64_t i = 0; i < j.rows; i++)
      for (uint64_t b = 0; b < j.width; b++)
        reinterpret_cast<uint8_t*>(j.dst + r * j.dst_rep_stride + i * j.dst_pitch)[b] =
            reinterpret_cast<const uint8_t*>(j.src + r * j.src_rep_stride + i * j.src_pitch)[b];
}

void test_bounds() {
  // Two regions with a gap between them inside one allocation, so nothing else is adjacent.
  std::vector<uint8_t> mem(3 * 4096);
  uint8_t* a = mem.data();
  uint8_t* b = mem.data() + 8192;
  auto regions = te::staging::merge_regions({{addr(a), 4096}, {addr(b), 4096}});
  std::string why;
  // NHD token rows of 2 heads × 64 B out of 8 heads: 64 rows.
  CopyJob ok{addr(a), addr(b), 128, 8, 512, 128, 1, 0, 0};
  CHECK_EQ(te::staging::check_jobs({ok}, regions, why), te::TE_OK);
  CopyJob past = ok;
  past.rows = 9;  // the last row ends at 8*512+128 > 4096
  CHECK_EQ(te::staging::check_jobs({ok, past}, regions, why), te::TE_ADDRESS_OUT_OF_RANGE);
  CHECK(why.find("copy 1") != std::string::npos);
  CopyJob outside = ok;
  outside.dst = addr(b) + 4090;
  CHECK_EQ(te::staging::check_jobs({outside}, regions, why), te::TE_ADDRESS_OUT_OF_RANGE);
  CHECK(why.find("destination") != std::string::npos);
  CopyJob overflow = ok;
  overflow.rows = UINT64_MAX / 2;
  CHECK_EQ(te::staging::check_jobs({overflow}, regions, why), te::TE_INVALID_ARGUMENT);
  CopyJob overlap = ok;
  overlap.dst_pitch = 64;  // rows would overwrite each other
  CHECK_EQ(te::staging::check_jobs({overlap}, regions, why), te::TE_INVALID_ARGUMENT);
  CopyJob empty{0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_EQ(te::staging::check_jobs({empty}, regions, why), te::TE_OK);
  // Touching regions merge into one.
  std::vector<uint8_t> c(8192);
  auto joined = te::staging::merge_regions({{addr(c.data()) + 4096, 4096}, {addr(c.data()), 4096}});
  CHECK_EQ(joined.size(), 1u);
  CHECK_EQ(joined[0].length, 8192u);
}

void test_copies_match_reference(size_t threads) {
  const size_t n = 1 << 20;
  std::vector<uint8_t> src(n), got(n, 0), want(n, 0);
  for (size_t i = 0; i < n; i++) src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::vector<CopyJob> jobs;
  // NHD gather (rows of a head slice), HND gather (heads of contiguous tokens), a plain copy.
  for (uint64_t p = 0; p < 32; p++) jobs.push_back({addr(src.data()) + p * 16384, 0, 256, 32, 512, 256, 1, 0, 0});
  for (uint64_t p = 0; p < 32; p++)
    jobs.push_back({addr(src.data()) + 524288 + p * 8192, 0, 64, 16, 256, 64, 4, 64, 1024});
  jobs.push_back({addr(src.data()) + 900000, 0, 4000, 1, 4000, 4000, 1, 0, 0});
  uint64_t off = 0;
  std::vector<CopyJob> ref = jobs;
  for (size_t k = 0; k < jobs.size(); k++) {
    jobs[k].dst = addr(got.data()) + off;
    ref[k].dst = addr(want.data()) + off;
    off += te::staging::destination_extent(ref[k]).end - ref[k].dst + 64;
  }
  for (const CopyJob& j : ref) reference(j);
  CopyPool pool(threads);
  pool.run(jobs);
  CHECK(std::memcmp(got.data(), want.data(), n) == 0);
  pool.run({});
}

void test_partition() {
  std::vector<CopyJob> jobs(10, CopyJob{0, 0, 100, 1, 100, 100, 1, 0, 0});
  auto b = te::staging::partition_by_bytes(jobs, 4);
  CHECK_EQ(b.front(), 0u);
  CHECK_EQ(b.back(), 10u);
  CHECK(b.size() <= 5);
  for (size_t i = 1; i < b.size(); i++) CHECK(b[i] > b[i - 1]);
  auto one = te::staging::partition_by_bytes({jobs[0]}, 4);
  CHECK_EQ(one.size(), 2u);
}

}  // namespace

void run_checksum_tests();  // checksum_test.cpp

int main() {
  test_bounds();
  test_partition();
  for (size_t t : {1, 2, 4}) test_copies_match_reference(t);
  run_checksum_tests();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("staging core tests passed\n");
  return 0;
}
