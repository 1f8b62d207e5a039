// Digests of the bytes a verified write moves (capabilities.verifiedWrites): 64-bit XXH3
// (xxHash 0.8.1, native/third_party/xxhash). The initiator takes one over what it sends, the
// target one over what landed, piece by piece as each is in the cache; a write whose two
// digests differ failed (DATA_CORRUPTED). XXH3 rather than CRC32C: fused into a loopback
// transfer it costs about half as much here (docs/benchmarks.md), and a digest is only
// ever compared with another XXH3 digest of te's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace te {

/** The digest of a byte stream fed in pieces, in order; the same whatever the pieces' sizes. */
class StreamDigest {
 public:
  StreamDigest();
  ~StreamDigest();
  StreamDigest(const StreamDigest&) = delete;
  StreamDigest& operator=(const StreamDigest&) = delete;

  /** Starts a new stream. */
  void reset();
  void update(const void* data, size_t n);
  /** The digest of everything fed since reset(); the stream may go on after it. */
  uint64_t value() const;

 private:
  void* state_;  // an XXH3_state_t, 64-byte aligned
};

/** The digest of `n` bytes at `data` (what a StreamDigest fed those bytes gives). */
uint64_t digest_of(const void* data, size_t n);

/** Which implementation runs here: "avx2" or "sse2" (x86-64), "scalar" elsewhere. */
const char* digest_implementation();

}  // namespace te
