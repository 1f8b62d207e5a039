// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), implemented here so the core needs no
// crypto library at build time. Used for the shared-secret challenge/response at connect.
#pragma once

#include <cstddef>
#include <cstdint>

namespace te {

class Sha256 {
 public:
  static constexpr size_t kDigestSize = 32;
  Sha256() { reset(); }
  void reset();
  void update(const void* data, size_t len);
  void finish(uint8_t out[kDigestSize]);

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t total_ = 0;
  size_t used_ = 0;
};

void sha256(const void* data, size_t len, uint8_t out[32]);

/** HMAC-SHA256 over the concatenation of `parts` (pointer/length pairs). */
struct Bytes {
  const void* data;
  size_t len;
};
void hmac_sha256(const void* key, size_t key_len, const Bytes* parts, size_t n_parts, uint8_t out[32]);

/** Constant-time comparison. */
bool equal_ct(const void* a, const void* b, size_t len);

}  // namespace te
