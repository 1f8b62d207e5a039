// C++ tests of the verified writes' digest (te/digest.h): XXH3's published values, the same
// digest however the stream is cut, and the AVX2 build agreeing with the baseline one.
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/digest_impl.h"
#include "check.h"
#include "te/digest.h"

using namespace te;

namespace {

std::vector<uint8_t> sample(size_t n) {
  std::vector<uint8_t> v(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

void test_known_values() {
  // XXH3_64bits with seed 0, from xxHash's documentation and its test suite.
  CHECK(digest_of("", 0) == 0x2D06800538D394C2ull);
  std::printf("     implementation: %s\n", digest_implementation());
}

void test_pieces() {
  const auto data = sample(3 << 20);
  for (size_t n : {size_t(1), size_t(17), size_t(240), size_t(241), size_t(4096), size_t(1 << 20), data.size()}) {
    const uint64_t whole = digest_of(data.data(), n);
    for (size_t piece : {size_t(1), size_t(63), size_t(64), size_t(1000), size_t(256 << 10)}) {
      if (piece == 1 && n > 4096) continue;
      StreamDigest d;
      for (size_t at = 0; at < n; at += piece) d.update(data.data() + at, n - at < piece ? n - at : piece);
      CHECK(d.value() == whole);
    }
  }
  // reset() starts over; a flipped byte anywhere changes the digest.
  StreamDigest d;
  d.update(data.data(), 100);
  d.reset();
  d.update(data.data(), 4096);
  CHECK(d.value() == digest_of(data.data(), 4096));
  auto flipped = data;
  for (size_t at : {size_t(0), size_t(12345), data.size() - 1}) {
    flipped[at] ^= 0x10;
    CHECK(digest_of(flipped.data(), flipped.size()) != digest_of(data.data(), data.size()));
    flipped[at] ^= 0x10;
  }
}

void test_implementations_agree() {
#if defined(TE_DIGEST_AVX2)
  if (!__builtin_cpu_supports("avx2")) {
    std::printf("     (no AVX2 on this CPU: only the baseline build ran)\n");
    return;
  }
  const auto data = sample(1 << 20);
  alignas(64) unsigned char a[1024], b[1024];
  CHECK(digest_impl::kStateSize <= sizeof(a));
  for (size_t n : {size_t(0), size_t(3), size_t(129), size_t(1024), size_t(99999), data.size()}) {
    digest_impl::kBaseline.reset(a);
    digest_impl::kAvx2.reset(b);
    digest_impl::kBaseline.update(a, data.data(), n);
    digest_impl::kAvx2.update(b, data.data(), n);
    CHECK(digest_impl::kBaseline.value(a) == digest_impl::kAvx2.value(b));
  }
#else
  std::printf("     (not an x86-64 build: one implementation)\n");
#endif
}

}  // namespace

int main() {
  static const CheckGroup groups[] = {{"digest known values", test_known_values},
                                      {"digest in pieces", test_pieces},
                                      {"digest implementations agree", test_implementations_agree}};
  return run_groups(groups);
}
