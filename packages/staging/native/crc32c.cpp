#include "crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define TE_CRC32C_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define TE_CRC32C_ARM 1
#endif

namespace te::staging {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, reflected

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t n = 0; n < 256; n++) {
      uint32_t c = n;
      for (int k = 0; k < 8; k++) c = (c & 1) ? kPoly ^ (c >> 1) : c >> 1;
      t[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
      for (int k = 1; k < 8; k++) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xff];
  }
};

const Tables& tables() {
  static const Tables t;  // thread-safe initialisation (C++11 statics)
  return t;
}

uint32_t table_raw(uint32_t c, const uint8_t* p, size_t n) {
  const auto& t = tables().t;
  while (n >= 8) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian hosts (x86-64, AArch64)
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return c;
}

// GF(2) 32×32 matrix times vector / matrix squared: the operators that append zero bytes
// to a CRC register (crc32c_combine, and the shifts of the interleaved instruction path).
uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, mat++)
    if (vec & 1) sum ^= *mat;
  return sum;
}

void gf2_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

#if defined(TE_CRC32C_X86) && defined(__x86_64__)
// The instruction has a latency of three cycles and a throughput of one: three streams over
// three adjacent blocks keep it busy, and their CRCs are joined by shifting the first over
// the second's length (a table lookup per byte of the register) and xoring.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

struct Shift {
  uint32_t t[4][256];
  // The operator appending `len` zero bytes, as four byte-indexed tables.
  explicit Shift(size_t len) {
    uint32_t op[32];
    uint32_t sq[32];
    op[0] = kPoly;  // one zero bit
    for (int n = 1; n < 32; n++) op[n] = 1u << (n - 1);
    for (int i = 0; i < 3; i++) {  // eight zero bits: one byte
      gf2_square(sq, op);
      std::memcpy(op, sq, sizeof op);
    }
    uint32_t acc[32];
    bool first = true;
    for (size_t n = len; n != 0; n >>= 1) {
      if (n & 1) {
        if (first) {
          std::memcpy(acc, op, sizeof acc);
          first = false;
        } else {
          uint32_t next[32];
          for (int k = 0; k < 32; k++) next[k] = gf2_times(op, acc[k]);
          std::memcpy(acc, next, sizeof acc);
        }
      }
      gf2_square(sq, op);
      std::memcpy(op, sq, sizeof op);
    }
    for (uint32_t b = 0; b < 256; b++)
      for (int k = 0; k < 4; k++) t[k][b] = gf2_times(acc, b << (8 * k));
  }
  uint32_t operator()(uint32_t crc) const {
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
  }
};

const Shift& long_shift() {
  static const Shift s(kLong);
  return s;
}

const Shift& short_shift() {
  static const Shift s(kShort);
  return s;
}

__attribute__((target("sse4.2"))) uint64_t three_streams(uint64_t c0, const uint8_t*& p, size_t& n, size_t block,
                                                         const Shift& shift) {
  while (n >= 3 * block) {
    uint64_t c1 = 0;
    uint64_t c2 = 0;
    const uint8_t* end = p + block;
    do {
      uint64_t a;
      uint64_t b;
      uint64_t d;
      std::memcpy(&a, p, 8);
      std::memcpy(&b, p + block, 8);
      std::memcpy(&d, p + 2 * block, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, d);
      p += 8;
    } while (p < end);
    c0 = shift(static_cast<uint32_t>(c0)) ^ c1;
    c0 = shift(static_cast<uint32_t>(c0)) ^ c2;
    p += 2 * block;
    n -= 3 * block;
  }
  return c0;
}

__attribute__((target("sse4.2"))) uint32_t hardware_raw(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  c64 = three_streams(c64, p, n, kLong, long_shift());
  c64 = three_streams(c64, p, n, kShort, short_shift());
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c;
}

__attribute__((target("sse4.2"))) void strided3_hw(const uint8_t* const base[3], uint64_t width, uint64_t rows,
                                                   uint64_t pitch, uint64_t reps, uint64_t rep_stride,
                                                   uint32_t out[3]) {
  uint64_t c0 = 0xffffffffu;
  uint64_t c1 = 0xffffffffu;
  uint64_t c2 = 0xffffffffu;
  for (uint64_t r = 0; r < reps; r++) {
    for (uint64_t i = 0; i < rows; i++) {
      const uint64_t at = r * rep_stride + i * pitch;
      const uint8_t* p0 = base[0] + at;
      const uint8_t* p1 = base[1] + at;
      const uint8_t* p2 = base[2] + at;
      uint64_t o = 0;
      for (; o + 8 <= width; o += 8) {
        uint64_t a;
        uint64_t b;
        uint64_t d;
        std::memcpy(&a, p0 + o, 8);
        std::memcpy(&b, p1 + o, 8);
        std::memcpy(&d, p2 + o, 8);
        c0 = _mm_crc32_u64(c0, a);
        c1 = _mm_crc32_u64(c1, b);
        c2 = _mm_crc32_u64(c2, d);
      }
      for (; o < width; o++) {
        c0 = _mm_crc32_u8(static_cast<uint32_t>(c0), p0[o]);
        c1 = _mm_crc32_u8(static_cast<uint32_t>(c1), p1[o]);
        c2 = _mm_crc32_u8(static_cast<uint32_t>(c2), p2[o]);
      }
    }
  }
  out[0] = ~static_cast<uint32_t>(c0);
  out[1] = ~static_cast<uint32_t>(c1);
  out[2] = ~static_cast<uint32_t>(c2);
}

bool detect() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#elif defined(TE_CRC32C_ARM)
uint32_t hardware_raw(uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __crc32cd(c, v);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = __crc32cb(c, *p++);
  return c;
}

bool detect() { return true; }  // compiled with the CRC extension: every CPU it runs on has it
#else
uint32_t hardware_raw(uint32_t c, const uint8_t* p, size_t n) { return table_raw(c, p, n); }
bool detect() { return false; }
#endif

const bool kHardware = detect();

}  // namespace

uint32_t crc32c_table(uint32_t crc, const void* data, size_t n) {
  return ~table_raw(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  return ~(kHardware ? hardware_raw(~crc, p, n) : table_raw(~crc, p, n));
}

bool crc32c_hardware() { return kHardware; }

void crc32c_strided3(const uint8_t* const base[3], uint64_t width, uint64_t rows, uint64_t pitch, uint64_t reps,
                     uint64_t rep_stride, uint32_t out[3]) {
#if defined(TE_CRC32C_X86) && defined(__x86_64__)
  if (kHardware) {
    strided3_hw(base, width, rows, pitch, reps, rep_stride, out);
    return;
  }
#endif
  for (int k = 0; k < 3; k++) {
    uint32_t crc = 0;
    for (uint64_t r = 0; r < reps; r++)
      for (uint64_t i = 0; i < rows; i++) crc = crc32c(crc, base[k] + r * rep_stride + i * pitch, width);
    out[k] = crc;
  }
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (len_b == 0) return crc_a;
  uint32_t even[32];
  uint32_t odd[32];
  // The operator that appends one zero bit, then two, four: squared until it appends 8·len_b.
  odd[0] = kPoly;
  for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
  gf2_square(even, odd);  // two zero bits
  gf2_square(odd, even);  // four
  do {
    gf2_square(even, odd);
    if (len_b & 1) crc_a = gf2_times(even, crc_a);
    len_b >>= 1;
    if (len_b == 0) break;
    gf2_square(odd, even);
    if (len_b & 1) crc_a = gf2_times(odd, crc_a);
    len_b >>= 1;
  } while (len_b != 0);
  return crc_a ^ crc_b;
}

}  // namespace te::staging
