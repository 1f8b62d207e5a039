// Strided rows: one side of a write whose bytes are `rows` rows of `width` bytes, `pitch` bytes
// apart (a head slice of NHD KV pages), seen as one packed range. On the local side (a
// gathered write) the wire never sees them: the target receives the packed bytes as an
// ordinary write. On the remote side (a scattered write) they travel in a WRITE_ROWS frame
// (wire.h) and the target receives the bytes straight into them. A slice of such a write
// covers packed bytes [from, from + len) of its request.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "te/memory_registry.h"
#include "te/status.h"

namespace tetcp {

// Rows narrower than this (a few heads of an NHD page) are packed through a small buffer that
// stays in the cache, on both ends: the sender packs them before its send, the target receives
// into one before it spreads them out. Straight through the kernel, as an iovec per row, each
// narrow row costs the socket copy a pass over memory of its own.
constexpr uint64_t kNarrowRowWidth = 4096;
// That buffer's size: well inside a core's L2, and as much as one send or receive of rows takes.
constexpr uint64_t kRowBounceBytes = 256 * 1024;

struct StridedRows {
  uint64_t base = 0;   // the request's first row
  uint64_t width = 0;  // 0: the request is contiguous
  uint64_t pitch = 0;

  bool gathers() const { return width != 0; }

  /**
   * The rows of a write of `len` bytes from `rows` rows `pitch` apart at `base`, and in `*span`
   * the bytes from the first row's start to the last row's end; INVALID_ARGUMENT when they are
   * not whole rows or overlap, ADDRESS_OUT_OF_RANGE when they run past the address space.
   */
  static int32_t make(uint64_t base, uint64_t len, uint32_t rows, uint64_t pitch, StridedRows* out, uint64_t* span) {
    if (rows < 2 || len == 0 || len % rows != 0 || pitch < len / rows) return te::TE_INVALID_ARGUMENT;
    const uint64_t width = len / rows;
    if (pitch > (UINT64_MAX - width) / (rows - 1)) return te::TE_ADDRESS_OUT_OF_RANGE;
    *span = (rows - 1) * pitch + width;
    if (te::range_overflows(base, *span)) return te::TE_ADDRESS_OUT_OF_RANGE;
    *out = StridedRows{base, width, pitch};
    return te::TE_OK;
  }
  /**
   * The rows a WRITE_ROWS frame names: `width`-byte rows `pitch` apart filling exactly
   * [span_addr, +span_len); `*capacity` = the packed bytes they hold. INVALID_ARGUMENT when
   * no whole number of such rows makes the span, or rows would overlap.
   */
  static int32_t of_span(uint64_t span_addr, uint64_t span_len, uint64_t width, uint64_t pitch, StridedRows* out,
                         uint64_t* capacity) {
    if (width == 0 || pitch < width || span_len < width || (span_len - width) % pitch != 0)
      return te::TE_INVALID_ARGUMENT;
    const uint64_t rows = (span_len - width) / pitch + 1;
    if (rows < 2 || te::range_overflows(span_addr, span_len)) return te::TE_INVALID_ARGUMENT;
    *out = StridedRows{span_addr, width, pitch};
    *capacity = rows * width;  // at most span_len: no overflow
    return te::TE_OK;
  }
  /** From the first row's start to the last row's end, for a request of `len` packed bytes. */
  uint64_t extent(uint64_t len) const { return (len / width - 1) * pitch + width; }
  /** Address of packed byte `at`. */
  uint64_t addr(uint64_t at) const { return base + (at / width) * pitch + at % width; }
  /** The local range packed bytes [from, from + len) touch (len > 0): first byte to one past the last. */
  void span(uint64_t from, uint64_t len, uint64_t* lo, uint64_t* hi) const {
    *lo = addr(from);
    *hi = addr(from + len - 1) + 1;
  }

  /** Calls `piece(addr, bytes)` for the row pieces of packed bytes [from, from + len), in order, while it returns true;
   * the bytes covered. */
  template <typename Piece>
  uint64_t walk(uint64_t from, uint64_t len, Piece piece) const {
    uint64_t done = 0;
    while (done < len) {
      const uint64_t at = from + done;
      const uint64_t in_row = width - at % width;
      const uint64_t take = in_row < len - done ? in_row : len - done;
      if (!piece(addr(at), take)) break;
      done += take;
    }
    return done;
  }

  /**
   * Appends iovecs for packed bytes [from, from + len), at most `room` of them; returns how
   * many bytes they cover (less than `len` when `room` ran out).
   */
  uint64_t append(uint64_t from, uint64_t len, iovec* iov, size_t* n, size_t room) const {
    return walk(from, len, [&](uint64_t a, uint64_t take) {
      if (room == 0) return false;
      iov[(*n)++] = {reinterpret_cast<void*>(a), static_cast<size_t>(take)};
      --room;
      return true;
    });
  }

  /** Copies `len` bytes from `src` into packed bytes [from, from + len) (the same-process path). */
  void copy_in(uint64_t from, uint64_t len, const uint8_t* src) const {
    walk(from, len, [&](uint64_t a, uint64_t take) {
      std::memmove(reinterpret_cast<void*>(a), src, take);
      src += take;
      return true;
    });
  }

  /** Copies packed bytes [from, from + len) to `dst` (the same-process path). */
  void copy_out(uint64_t from, uint64_t len, uint8_t* dst) const {
    uint8_t* out = dst;
    walk(from, len, [&](uint64_t a, uint64_t take) {
      std::memmove(out, reinterpret_cast<const void*>(a), take);
      out += take;
      return true;
    });
  }
};

}  // namespace tetcp
