// Narrow rows against whole ranges: what a head slice of NHD KV pages costs the memory
// system on this machine, on one thread. With 8 KV heads of 256 bytes split over two ranks,
// a token's row is 1 KiB and each rank's slice is one 512-byte half of it.
//
//   rows_bench [--mib N] [--row BYTES] [--width BYTES] [--rounds R] [--corrupt-one-byte]
//              [--corrupt-sent-byte]
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
// Sends (every slice packed into its own 256 KiB buffer, then copied on as a send copies it
// into the socket: what a transfer per destination rank costs against one shared gather):
//   one slice per pass  each slice's own pass over the rows (a transfer per decode rank)
//   shared gather       one pass over whole rows fills every slice's buffer
//   whole range         the send copy alone, straight from contiguous memory (the raw write)
//   GB/s counts the source bytes sent.
// Each figure is the best of --rounds. After each read figure the buffer is compared with the
// source bytes its last pass copied there; after the slice writes the whole destination with
// what they wrote, byte for byte; after each send figure the last bytes sent for every slice
// with the source rows they came from. --corrupt-one-byte flips one destination byte before
// the write check, --corrupt-sent-byte one sent byte before the send check (the verifiers'
// own tests). Exit status 0 only when every check holds.
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

// The send copy's destination: a ring as large as a socket's send buffer, past the cache.
#define NET (4u << 20)
static uint8_t *net, *packs;
static size_t net_at, last_sent[64], sent_from, last_first, last_rows;

/** Copies `n` bytes to the ring (as a send copies into the socket); where they went. */
static size_t send_copy(const uint8_t* p, size_t n) {
  if (net_at + n > NET) net_at = 0;
  memcpy(net + net_at, p, n);
  net_at += n;
  return net_at - n;
}

/** Slice `s` of rows [first, first + n) into `out`, one row at a time. */
static void pack_slice(uint8_t* out, size_t s, size_t first, size_t n) {
  for (size_t k = 0; k < n; k++) memcpy(out + k * width, src + (first + k) * row + s * width, width);
}

/** Every slice sent, rows a buffer's worth at a time: one pass per slice, or one pass for all. */
static void send_slices(int shared) {
  const size_t slices = row / width, per = BUFFER / width;
  for (size_t pass = 0; pass < (shared ? 1 : slices); pass++)
    for (size_t first = 0; first < rows_total; first += per) {
      const size_t n = rows_total - first < per ? rows_total - first : per;
      if (shared) {
        for (size_t k = 0; k < n; k++)
          for (size_t s = 0; s < slices; s++)
            memcpy(packs + s * BUFFER + k * width, src + (first + k) * row + s * width, width);
      } else {
        pack_slice(packs + pass * BUFFER, pass, first, n);
      }
      for (size_t s = shared ? 0 : pass; s < (shared ? slices : pass + 1); s++)
        last_sent[s] = send_copy(packs + s * BUFFER, n * width);
      last_first = first;
      last_rows = n;
    }
  // A pass per slice: the later passes' sends went round the ring over the earlier ones'.
  sent_from = shared ? 0 : slices - 1;
}

/** Whether the last bytes sent for every slice still in the ring are its source rows. */
static int sent_landed(void) {
  for (size_t s = sent_from; s < row / width; s++)
    for (size_t k = 0; k < last_rows; k++)
      if (memcmp(net + last_sent[s] + k * width, src + (last_first + k) * row + s * width, width) != 0) return 0;
  return 1;
}

static int ok = 1;
static int corrupt_sent = 0;
static double timed_best(int rounds, int kind) {
  double b = 1e30;
  for (int n = 0; n < rounds; n++) {
    const double t = now_s();
    switch (kind) {
      case 0:
        read_pass(0, row, row);
        break;
      case 1:
        for (size_t s = 0; s < row / width; s++) read_pass(s * width, width, width);
        break;
      case 2:
        read_pass(0, row, width);
        break;
      case 3:
        for (size_t o = 0; o < total; o += BUFFER) memcpy(dst + o, buf, total - o < BUFFER ? total - o : BUFFER);
        break;
      case 4:
        for (size_t o = 0; o + BUFFER <= total; o += BUFFER) stream_copy(dst + o, buf, BUFFER);
        _mm_sfence();
        break;
      case 5:
        for (size_t s = 0; s < row / width; s++) write_slice(plain_copy, s);
        break;
      case 6:
        for (size_t s = 0; s < row / width; s++) write_slice(stream_copy, s);
        _mm_sfence();
        break;
      case 7:
        send_slices(0);
        break;
      case 8:
        send_slices(1);
        break;
      case 9:
        for (size_t o = 0; o < total; o += BUFFER) send_copy(src + o, total - o < BUFFER ? total - o : BUFFER);
        break;
    }
    const double e = now_s() - t;
    if (e < b) b = e;
  }
  if (kind == 0) ok &= read_landed(0, row, row);
  if (kind == 1) ok &= read_landed((row / width - 1) * width, width, width);
  if (kind == 2) ok &= read_landed(0, row, width);
  if (kind == 7 || kind == 8) {
    if (corrupt_sent) net[last_sent[sent_from] + last_rows * width / 2] ^= 0x5a;
    ok &= sent_landed();
  }
  return b;
}

int main(int argc, char** argv) {
  size_t mib = 1024;
  int rounds = 3, corrupt = 0;
  row = 1024;
  width = 512;
  static struct option opts[] = {{"mib", 1, 0, 'm'},
                                 {"row", 1, 0, 'r'},
                                 {"width", 1, 0, 'w'},
                                 {"rounds", 1, 0, 'n'},
                                 {"corrupt-one-byte", 0, 0, 'c'},
                                 {"corrupt-sent-byte", 0, 0, 's'},
                                 {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'm')
      mib = strtoull(optarg, NULL, 10);
    else if (c == 'r')
      row = strtoull(optarg, NULL, 10);
    else if (c == 'w')
      width = strtoull(optarg, NULL, 10);
    else if (c == 'n')
      rounds = atoi(optarg);
    else if (c == 'c')
      corrupt = 1;
    else if (c == 's')
      corrupt_sent = 1;
    else
      return 2;
  }
  if (mib == 0 || rounds < 1 || width == 0 || width % 64 || row % width || BUFFER % row || row / width > 64) {
    fprintf(stderr,
            "rows_bench: --mib and --rounds must be positive; --width a multiple of 64 that divides --row, "
            "at most 64 slices per row; --row must divide 256 KiB\n");
    return 2;
  }
  total = mib << 20;
  rows_total = total / row;
  src = aligned_alloc(4096, total);
  dst = aligned_alloc(4096, total);
  buf = aligned_alloc(4096, BUFFER);
  net = aligned_alloc(4096, NET);
  packs = aligned_alloc(4096, (size_t)BUFFER * (row / width));
  if (!src || !dst || !buf || !net || !packs) {
    fprintf(stderr, "rows_bench: could not allocate 2 × %zu MiB; try a smaller --mib\n", mib);
    return 2;
  }
  // No period a slice or a row could line up with: a byte copied from the wrong place shows.
  for (size_t i = 0; i < total; i++) src[i] = (uint8_t)((i * 0x9E3779B97F4A7C15ull) >> 56);
  memset(dst, 0, total);  // pages touched before any timing
  memset(buf, 0, BUFFER);
  memset(net, 0, NET);
  memset(packs, 0, (size_t)BUFFER * (row / width));

  const double gb = total / 1e9;
  printf("%zu MiB, rows of %zu bytes, slices of %zu, best of %d (GB/s of bytes copied)\n", mib, row, width, rounds);
  printf("read  whole rows                   %6.2f\n", gb / timed_best(rounds, 0));
  printf("read  one slice per pass           %6.2f\n", gb / timed_best(rounds, 1));
  printf("read  a row's slices together      %6.2f\n", gb / timed_best(rounds, 2));
  printf("write whole range, memcpy          %6.2f\n", gb / timed_best(rounds, 3));
  printf("write whole range, non-temporal    %6.2f\n", gb / timed_best(rounds, 4));
  printf("write one slice per pass, memcpy   %6.2f\n", gb / timed_best(rounds, 5));
  printf("write one slice per pass, non-temp %6.2f\n", gb / timed_best(rounds, 6));
  printf("send  one slice per pass           %6.2f\n", gb / timed_best(rounds, 7));
  printf("send  shared gather                %6.2f\n", gb / timed_best(rounds, 8));
  printf("send  whole range                  %6.2f\n", gb / timed_best(rounds, 9));
  if (corrupt) dst[total / 3] ^= 0x5a;
  for (size_t r = 0; r < rows_total && ok; r++)
    for (size_t s = 0; s < row / width; s++)
      if (memcmp(dst + r * row + s * width, buf + slot(r, width), width) != 0) ok = 0;
  printf("verified: %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
