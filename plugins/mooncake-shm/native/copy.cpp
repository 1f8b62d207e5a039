// process_vm_* copies and the huge-page hint (see copy.h).
#include "copy.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "te/streaming_copy.h"
#include "wire.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace teshm {

static te::Status map_errno(int e, const char* call, std::string* why) {
  *why = std::string(call) + ": " + std::strerror(e);
  switch (e) {
    case ESRCH:
      *why += " (the initiator exited)";
      return te::TE_PEER_FAILED;
    case EFAULT:
      *why += " (the initiator's range is not mapped in its address space)";
      return te::TE_ADDRESS_OUT_OF_RANGE;
    case EPERM:
      *why +=
          " (ptrace access to the initiator is not permitted: same user and Yama ptrace_scope <= 1, or CAP_SYS_PTRACE)";
      return te::TE_AUTH_FAILED;
    default:
      return te::TE_TRANSFER_FAILED;
  }
}

te::Status copy_with_peer(pid_t pid, uint8_t op, uint64_t local, uint64_t remote, uint64_t len, std::string* why) {
  uint64_t done = 0;
  // The kernel may copy less than asked (it stops at the first fault); continue where it stopped.
  while (done < len) {
    iovec l{reinterpret_cast<void*>(local + done), static_cast<size_t>(len - done)};
    iovec r{reinterpret_cast<void*>(remote + done), static_cast<size_t>(len - done)};
    ssize_t n = op == OP_WRITE ? process_vm_readv(pid, &l, 1, &r, 1, 0) : process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return map_errno(errno, op == OP_WRITE ? "process_vm_readv" : "process_vm_writev", why);
    }
    if (n == 0) {
      *why = "the kernel copied nothing (a range ends in an unmapped page)";
      return te::TE_TRANSFER_FAILED;
    }
    done += static_cast<uint64_t>(n);
  }
  return te::TE_OK;
}

// glibc's memcpy moves large blocks with `rep movsb`, which on AMD Zen runs at a quarter of
// its speed when the destination sits 1-31 bytes past the source modulo 64 (measured here:
// 256 KiB blocks at 7.6 GB/s aligned, 1.9-2.0 GB/s at +8 and +16). Registered memory has any
// alignment (a JS buffer is 8- or 16-byte aligned), so the copy aligns the destination and
// moves 64 bytes per step with unaligned loads.
//
// From kStreamFrom bytes on it uses te::streaming_copy (the same loop with non-temporal
// stores): the destination is written without first being read into the cache, and the
// copy does not evict the cache for data nobody reads soon (KV cache lands for a later step
// or a device). Copying 64 KiB blocks on the 2-vCPU bench machine, two threads at once moved
// 20-24 GB/s together with cached stores and 28-30 GB/s with streaming ones; one thread alone
// 21-23 and 25-26.
constexpr size_t kStreamFrom = 32 << 10;

static void copy_bytes(uint8_t* d, const uint8_t* s, size_t n) {
  if (n >= kStreamFrom) {
    te::streaming_copy(d, s, n);
    te::streaming_fence();  // visible before the completion that reports them is sent
    return;
  }
#if defined(__SSE2__)
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_store_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_store_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
#endif
  std::memcpy(d, s, n);
}

void copy_mapped(uint8_t op, uint64_t local, uint8_t* initiator, uint64_t len) {
  auto* here = reinterpret_cast<uint8_t*>(local);
  if (op == OP_WRITE)
    copy_bytes(here, initiator, static_cast<size_t>(len));
  else
    copy_bytes(initiator, here, static_cast<size_t>(len));
}

te::Status read_peer(pid_t pid, uint64_t remote, void* out, size_t len, std::string* why) {
  iovec l{out, len};
  iovec r{reinterpret_cast<void*>(remote), len};
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (n == static_cast<ssize_t>(len)) return te::TE_OK;
  if (n < 0) return map_errno(errno, "process_vm_readv", why);
  *why = "short read of the initiator's probe";
  return te::TE_TRANSFER_FAILED;
}

std::string prefer_huge_pages(uint64_t addr, uint64_t len) {
  constexpr uint64_t kHuge = 2ull << 20;
  uint64_t start = (addr + kHuge - 1) & ~(kHuge - 1);
  uint64_t end = (addr + len) & ~(kHuge - 1);
  if (end <= start) return "smaller than a huge page";
  void* p = reinterpret_cast<void*>(start);
  size_t n = static_cast<size_t>(end - start);
  if (madvise(p, n, MADV_HUGEPAGE) != 0) return std::string("MADV_HUGEPAGE refused: ") + std::strerror(errno);
  // Collapsing copies the pages once now; refused (old kernel, THP off) it stays a hint for later faults.
  if (madvise(p, n, MADV_COLLAPSE) != 0) return std::string("hinted; MADV_COLLAPSE refused: ") + std::strerror(errno);
  return "collapsed";
}

}  // namespace teshm
