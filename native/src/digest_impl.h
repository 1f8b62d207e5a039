// The XXH3 streaming calls, compiled once per instruction set (digest.cpp, digest_avx2.cpp):
// the digest is the same whichever runs, only its speed differs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace te::digest_impl {

struct Calls {
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t n);
  uint64_t (*value)(const void* state);
};

extern const Calls kBaseline;
#if defined(TE_DIGEST_AVX2)
extern const Calls kAvx2;
#endif
/** sizeof(XXH3_state_t). */
extern const size_t kStateSize;

}  // namespace te::digest_impl
