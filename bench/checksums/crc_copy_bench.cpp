// What end-to-end checksums cost a loopback transfer on one thread: taken in separate passes
// over the source and the landed bytes (what te's KV checksums do today, beside the write and
// before Success), or fused into the transport's own copies while the bytes are in the cache.
//
//   crc_copy_bench [--mib N] [--rounds R] [--corrupt-in-flight] [--crc-only]
//
// A transfer here is what a loopback TCP write costs the memory system: every 256 KiB piece
// of an N MiB source is copied into a 4 MiB ring (the send copy into the socket) and from
// there into an N MiB destination (the receive copy). Variants, each the best of --rounds:
//   plain     the two copies
//   fused     the piece's CRC32C taken just before its send copy (which then reads it from
//             the cache); received into a 256 KiB buffer, its CRC taken there, then copied
//             out with non-temporal stores
//   separate  the two copies, then a CRC pass over the whole source and one over the whole
//             destination
// The CRC is te's own (packages/staging/native/crc32c.cpp: the crc32 instruction, three
// streams). After each variant the destination is compared with the source byte for byte;
// the fused and separate variants also compare the CRC the sender took with the one the
// receiver took, piece by piece (fused) or whole (separate). --corrupt-in-flight flips one
// byte of the ring between the copies of one piece in every variant (the verifiers' own
// test); --crc-only leaves out the byte comparison, so that only the CRCs can see it. Exit
// status 0 only when every check holds.
#include <getopt.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "crc32c.h"
#include "te/streaming_copy.h"

using te::staging::crc32c;

namespace {

constexpr size_t kPiece = 256u << 10;
constexpr size_t kRing = 4u << 20;

size_t total;
uint8_t *src, *dst, *ring, *bounce;
bool corrupt = false;
bool crc_only = false;
bool ok = true;

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// The piece in flight at `o` (the third of the source) has one byte flipped on the way.
void in_flight(uint8_t* slot, size_t o) {
  if (corrupt && o == (total / 3) / kPiece * kPiece) slot[kPiece / 2] ^= 0x5a;
}

enum Variant { PLAIN, FUSED, SEPARATE };

double run(Variant v) {
  const double t = now_s();
  size_t at = 0;
  for (size_t o = 0; o < total; o += kPiece) {
    uint8_t* slot = ring + at;
    at = (at + kPiece) % kRing;
    uint32_t sent = 0;
    if (v == FUSED) sent = crc32c(0, src + o, kPiece);
    std::memcpy(slot, src + o, kPiece);
    in_flight(slot, o);
    if (v == FUSED) {
      std::memcpy(bounce, slot, kPiece);
      if (crc32c(0, bounce, kPiece) != sent) ok = false;
      te::streaming_copy(dst + o, bounce, kPiece);
    } else {
      std::memcpy(dst + o, slot, kPiece);
    }
  }
  if (v == FUSED) te::streaming_fence();
  if (v == SEPARATE && crc32c(0, src, total) != crc32c(0, dst, total)) ok = false;
  const double e = now_s() - t;
  if (!crc_only && std::memcmp(dst, src, total) != 0) ok = false;
  return e;
}

double best(Variant v, int rounds) {
  double b = 1e30;
  for (int r = 0; r < rounds; r++) {
    std::memset(dst, 0, total);  // every round lands its own bytes
    const double e = run(v);
    if (e < b) b = e;
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 1024;
  int rounds = 3;
  static option opts[] = {{"mib", 1, nullptr, 'm'},
                          {"rounds", 1, nullptr, 'n'},
                          {"corrupt-in-flight", 0, nullptr, 'c'},
                          {"crc-only", 0, nullptr, 'o'},
                          {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
    if (c == 'm')
      mib = std::strtoull(optarg, nullptr, 10);
    else if (c == 'n')
      rounds = std::atoi(optarg);
    else if (c == 'c')
      corrupt = true;
    else if (c == 'o')
      crc_only = true;
    else
      return 2;
  }
  if (mib == 0 || mib > (1u << 20) || rounds < 1) {
    std::fprintf(stderr, "crc_copy_bench: --mib and --rounds must be positive whole numbers\n");
    return 2;
  }
  total = mib << 20;
  src = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
  dst = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
  ring = static_cast<uint8_t*>(std::aligned_alloc(4096, kRing));
  bounce = static_cast<uint8_t*>(std::aligned_alloc(4096, kPiece));
  if (!src || !dst || !ring || !bounce) {
    std::fprintf(stderr, "crc_copy_bench: could not allocate 2 × %zu MiB; try a smaller --mib\n", mib);
    return 2;
  }
  for (size_t i = 0; i < total; i++) src[i] = static_cast<uint8_t>((i * 0x9E3779B97F4A7C15ull) >> 56);
  std::memset(ring, 0, kRing);
  std::memset(bounce, 0, kPiece);

  const double gib = total / double(1u << 30);
  const double plain = best(PLAIN, rounds) / gib * 1e3;
  const double fused = best(FUSED, rounds) / gib * 1e3;
  const double separate = best(SEPARATE, rounds) / gib * 1e3;
  std::printf("%zu MiB through a 4 MiB ring in 256 KiB pieces, best of %d (ms per GiB; crc32c %s)\n", mib, rounds,
              te::staging::crc32c_hardware() ? "instruction" : "table");
  std::printf("plain     %7.1f\n", plain);
  std::printf("fused     %7.1f  (checksums add %.1f: the transfer at %.2f× of plain)\n", fused, fused - plain,
              plain / fused);
  std::printf("separate  %7.1f  (checksums add %.1f: the transfer at %.2f× of plain)\n", separate, separate - plain,
              plain / separate);
  std::printf("verified: %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
