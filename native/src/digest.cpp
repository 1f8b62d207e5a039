#include "te/digest.h"

#include <cstdlib>
#include <new>

#include "digest_calls.inc"
#include "digest_impl.h"

namespace te {

namespace digest_impl {
const Calls kBaseline = {reset_state, update_state, state_value};
const size_t kStateSize = sizeof(XXH3_state_t);
}  // namespace digest_impl

namespace {

const digest_impl::Calls& pick() {
#if defined(TE_DIGEST_AVX2)
  if (__builtin_cpu_supports("avx2")) return digest_impl::kAvx2;
#endif
  return digest_impl::kBaseline;
}

const digest_impl::Calls& calls() {
  static const digest_impl::Calls& c = pick();
  return c;
}

}  // namespace

StreamDigest::StreamDigest() {
  // XXH3's state holds 64-byte aligned accumulators.
  const size_t size = (digest_impl::kStateSize + 63) / 64 * 64;
  state_ = std::aligned_alloc(64, size);
  if (!state_) throw std::bad_alloc();
  reset();
}

StreamDigest::~StreamDigest() { std::free(state_); }

void StreamDigest::reset() { calls().reset(state_); }

void StreamDigest::update(const void* data, size_t n) {
  if (n) calls().update(state_, data, n);
}

uint64_t StreamDigest::value() const { return calls().value(state_); }

uint64_t digest_of(const void* data, size_t n) {
  StreamDigest d;
  d.update(data, n);
  return d.value();
}

const char* digest_implementation() {
#if defined(TE_DIGEST_AVX2)
  if (&calls() == &digest_impl::kAvx2) return "avx2";
#endif
#if defined(__x86_64__)
  return "sse2";
#else
  return "scalar";
#endif
}

}  // namespace te
