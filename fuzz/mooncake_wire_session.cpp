// libFuzzer target: the mooncake-wire target's data-path session (plugins/mooncake-wire),
// fed arbitrary bytes as if a Mooncake initiator sent them on one connection. Registered
// memory sits at a fixed address so inputs can aim at it: a remote-accessible region, a
// local-only region after a gap, and guard pages around them that no input may change.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "memory_stream.h"
#include "session.h"
#include "te/memory_registry.h"
#include "wire.h"

namespace {

constexpr uint64_t kBase = 0x300000000000ull;  // seeds use addresses from here (above ASan's shadow)
constexpr uint64_t kRegion = 4096;
constexpr uint64_t kSpan = 4 * kRegion;  // guard | remote region | guard | local-only region

uint8_t* arena() {
  static uint8_t* a = [] {
    void* p = mmap(reinterpret_cast<void*>(kBase), kSpan, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != reinterpret_cast<void*>(kBase)) {
      std::fprintf(stderr, "cannot map the fuzz arena at 0x%llx\n", static_cast<unsigned long long>(kBase));
      std::abort();
    }
    return static_cast<uint8_t*>(p);
  }();
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t* a = arena();
  std::memset(a, 0xEE, kSpan);
  te::MemoryRegistry registry;
  registry.add(kBase + kRegion, kRegion, true);
  registry.add(kBase + 3 * kRegion, kRegion, false);
  mcwire::TargetCounters counters;
  mcwire::MemoryStream s(data, size);
  mcwire::serve_session(s, registry, counters);
  // Nothing outside the remote-accessible region may have changed.
  for (uint64_t i = 0; i < kSpan; ++i) {
    if (i >= kRegion && i < 2 * kRegion) continue;
    if (a[i] != 0xEE) {
      std::fprintf(stderr, "byte at 0x%llx outside the remote region was written\n",
                   static_cast<unsigned long long>(kBase + i));
      std::abort();
    }
  }
  // When the first request asks for the v2 framing, the first reply bytes are a status frame.
  if (size >= mcwire::kHeaderBytes && (data[16] & mcwire::kV2Flag) && s.out.size() >= mcwire::kStatusBytes) {
    uint64_t st = mcwire::decode_status(s.out.data());
    if (!mcwire::status_valid(st)) std::abort();
  }
  if (counters.bytes_written > size) std::abort();
  return 0;
}
