// Narrow rows against whole ranges: what a head slice of NHD KV pages costs the memory
// system on this machine, on one thread. With 8 KV heads of 256 bytes split over two ranks,
// a token's row is 1 KiB and each rank's slice is one 512-byte half of it.
//
//   rows_bench [--mib N] [--row BYTES] [--width BYTES] [--rounds R] [--corrupt-one-byte]
//
// Reads (into a 256 KiB buffer that stays in the cache, as a transport's send copy does):
//   whole rows        every byte of the source, in order
//   one slice         `width` bytes of every `row`, one pass per slice (as two transfers each
//                     reading their own heads do); GB/s counts the bytes copied
//   slices together   every slice of a row copied before the next row (one pass)
// Writes (of the cache-resident buffer into a destination of N MiB):
//   whole range       memcpy, and non-temporal stores
//   one slice         `width`-byte rows into every `row` bytes, one pass per slice: memcpy,
//                     and non-temporal stores (what mooncake-tcp's target and the staging
//                     copier use for rows under 4 KiB: te/streaming_copy.h)
// Each figure is the best of --rounds. After each read figure the buffer is compared with the
// source bytes its last pass copied there; after the slice writes the whole destination with
// what they wrote, byte for byte. --corrupt-one-byte flips one destination byte before that
// check (the verifier's own test). Exit status 0 only when every check holds.
#include <emmintrin.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUFFER (256u << 10)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// Non-temporal copy; dst 16-byte aligned and n a multiple of 64 here.
static void stream_copy(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
    _mm_stream_si128((__m128i*)(dst + i), a);
    _mm_stream_si128((__m128i*)(dst + i + 16), b);
    _mm_stream_si128((__m128i*)(dst + i + 32), c);
    _mm_stream_si128((__m128i*)(dst + i + 48), d);
  }
}

typedef void (*copy_fn)(uint8_t*, const uint8_t*, size_t);
static void plain_copy(uint8_t* dst, const uint8_t* src, size_t n) { memcpy(dst, src, n); }

static size_t total, row, width, rows_total;
static uint8_t *src, *dst, *buf;

// The buffer slot of the k-th copy of `piece` bytes (the buffer is reused round and round).
static size_t slot(size_t k, size_t piece) { return (k * piece) % BUFFER; }

/** Copies `piece` bytes at offsets first, first + piece, ... < first + span of every row into the buffer. */
static void read_pass(size_t first, size_t span, size_t piece) {
  size_t k = 0;
  for (size_t o = 0; o < total; o += row)
    for (size_t at = first; at < first + span; at += piece) memcpy(buf + slot(k++, piece), src + o + at, piece);
}

/** Whether the buffer holds what read_pass(first, span, piece) copied last. */
static int read_landed(size_t first, size_t span, size_t piece) {
  const size_t per_row = span / piece, copies = rows_total * per_row, kept = BUFFER / piece;
  for (size_t k = copies > kept ? copies - kept : 0; k < copies; k++) {
    const size_t r = k / per_row, at = first + (k % per_row) * piece;
    if (memcmp(buf + slot(k, piece), src + r * row + at, piece) != 0) return 0;
  }
  return 1;
}

/** Writes the buffer's `width`-byte pieces into slice `s` of every row. */
static void write_slice(copy_fn copy, size_t s) {
  for (size_t r = 0; r < rows_total; r++) copy(dst + r * row + s * width, buf + slot(r, width), width);
}

static int ok = 1;
static double timed_best(int rounds, int kind) {
  double b = 1e30;
  for (int n = 0; n < rounds; n++) {
    const double t = now_s();
    switch (kind) {
      case 0: read_pass(0, row, row); break;
      case 1: for (size_t s = 0; s < row / width; s++) read_pass(s * width, width, width); break;
      case 2: read_pass(0, row, width); break;
      case 3: for (size_t o = 0; o < total; o += BUFFER) memcpy(dst + o, buf, total - o < BUFFER ? total - o : BUFFER); break;
      case 4: for (size_t o = 0; o + BUFFER <= total; o += BUFFER) stream_copy(dst + o, buf, BUFFER); _mm_sfence(); break;
      case 5: for (size_t s = 0; s < row / width; s++) write_slice(plain_copy, s); break;
      case 6: for (size_t s = 0; s < row / width; s++) write_slice(stream_copy, s); _mm_sfence(); break;
    }
    const double e = now_s() - t;
    if (e < b) b = e;
  }
  if (kind == 0) ok &= read_landed(0, row, row);
  if (kind == 1) ok &= read_landed((row / width - 1) * width, width, width);
  if (kind == 2) ok &= read_landed(0, row, width);
  return b;
}

int main(int argc, char** argv) {
  size_t mib = 1024;
  int rounds = 3, corrupt = 0;
  row = 1024;
  width = 512;
  static struct option opts[] = {{"mib", 1, 0, 'm'},    {"row", 1, 0, 'r'},    {"width", 1, 0, 'w'},
                                 {"rounds", 1, 0, 'n'}, {"corrupt-one-byte", 0, 0, 'c'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'm') mib = strtoull(optarg, NULL, 10);
    else if (c == 'r') row = strtoull(optarg, NULL, 10);
    else if (c == 'w') width = strtoull(optarg, NULL, 10);
    else if (c == 'n') rounds = atoi(optarg);
    else if (c == 'c') corrupt = 1;
    else return 2;
  }
  if (mib == 0 || rounds < 1 || width == 0 || width % 64 || row % width || BUFFER % row) {
    fprintf(stderr, "rows_bench: --mib and --rounds must be positive; --width a multiple of 64 that divides --row; --row must divide 256 KiB\n");
    return 2;
  }
  total = mib << 20;
  rows_total = total / row;
  src = aligned_alloc(4096, total);
  dst = aligned_alloc(4096, total);
  buf = aligned_alloc(4096, BUFFER);
  if (!src || !dst || !buf) {
    fprintf(stderr, "rows_bench: could not allocate 2 × %zu MiB; try a smaller --mib\n", mib);
    return 2;
  }
  for (size_t i = 0; i < total; i++) src[i] = (uint8_t)(i * 131 + (i >> 20));
  memset(dst, 0, total);  // pages touched before any timing
  memset(buf, 0, BUFFER);

  const double gb = total / 1e9;
  printf("%zu MiB, rows of %zu bytes, slices of %zu, best of %d (GB/s of bytes copied)\n", mib, row, width, rounds);
  printf("read  whole rows                   %6.2f\n", gb / timed_best(rounds, 0));
  printf("read  one slice per pass           %6.2f\n", gb / timed_best(rounds, 1));
  printf("read  a row's slices together      %6.2f\n", gb / timed_best(rounds, 2));
  printf("write whole range, memcpy          %6.2f\n", gb / timed_best(rounds, 3));
  printf("write whole range, non-temporal    %6.2f\n", gb / timed_best(rounds, 4));
  printf("write one slice per pass, memcpy   %6.2f\n", gb / timed_best(rounds, 5));
  printf("write one slice per pass, non-temp %6.2f\n", gb / timed_best(rounds, 6));
  if (corrupt) dst[total / 3] ^= 0x5a;
  for (size_t r = 0; r < rows_total && ok; r++)
    for (size_t s = 0; s < row / width; s++)
      if (memcmp(dst + r * row + s * width, buf + slot(r, width), width) != 0) ok = 0;
  printf("verified: %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
