// Tests of DeviceMap (native/device_map.h), the record of which registered regions are device
// memory. The addon lists a device region before the registry publishes it and delists it by
// its registration's token after the registry removed it; these tests drive the map through
// the interleavings that ordering produces. (The addon's own calls need a CUDA device:
// registerMemory refuses device memory before touching the map when there is none.)
// Built and run by test/device-map.test.ts.
#include "device_map.h"

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

using namespace tetcp;

constexpr uint64_t A = 0x7f0000000000ull;
constexpr uint64_t L = 1 << 20;

// unregisterMemory(A) runs on a worker: the registry forgets A, then (later) the worker
// delists A. registerMemory(A) on the JS thread in between lists A again: the worker's
// delisting must not take the new registration's entry with it.
static void test_reregister_during_unregister() {
  DeviceMap m;
  uint64_t first = m.add(A, L, 0);
  CHECK(m.device_of(A + 10) == 0);
  uint64_t second = m.add(A, L, 0);  // registered again before the worker delisted `first`
  m.remove(A, first);                // the worker of the first unregister
  CHECK(m.device_of(A) == 0);
  CHECK(m.device_of(A + L - 1) == 0);
  CHECK(m.size() == 1);
  m.remove(A, second);
  CHECK(m.device_of(A) == kHost);
  CHECK(m.size() == 0);
}

// A registration is listed before the registry decides; when the registry refuses it
// (OVERLAP), delisting it leaves the region it overlapped as it was.
static void test_refused_registration_leaves_others() {
  DeviceMap m;
  uint64_t live = m.add(A, L, 1);
  // Same start, shorter: listed, then refused.
  uint64_t refused = m.add(A, 4096, 1);
  CHECK(m.device_of(A + L / 2) == 1);  // still device memory while both are listed
  m.remove(A, refused);
  CHECK(m.device_of(A + L / 2) == 1);
  CHECK(m.device_of(A) == 1);
  // Starting inside the live region: while listed, addresses of the live region past it
  // are still device memory (not host: that would memcpy into device memory).
  uint64_t inside = m.add(A + 4096, 4096, 1);
  CHECK(m.device_of(A + 3 * 4096) == 1);
  CHECK(m.device_of(A + L - 1) == 1);
  CHECK(m.device_of(A + 4096 + 10) == 1);
  m.remove(A, inside);  // wrong address: nothing happens
  CHECK(m.size() == 2);
  m.remove(A + 4096, inside);
  CHECK(m.size() == 1);
  CHECK(m.device_of(A + L - 1) == 1);
  CHECK(m.device_of(A + L) == kHost);
  CHECK(m.device_of(A - 1) == kHost);
  m.remove(A, live);
  CHECK(m.size() == 0);
}

// Several disjoint regions of different sizes: each address finds its own region.
static void test_disjoint_lookup() {
  DeviceMap m;
  std::vector<uint64_t> tokens;
  tokens.push_back(m.add(A, 64 * L, 0));
  for (int i = 0; i < 16; ++i) tokens.push_back(m.add(A + 64 * L + uint64_t(i) * 2 * L, L, i % 4));
  CHECK(m.device_of(A + 63 * L) == 0);
  for (int i = 0; i < 16; ++i) {
    CHECK(m.device_of(A + 64 * L + uint64_t(i) * 2 * L) == i % 4);
    CHECK(m.device_of(A + 64 * L + uint64_t(i) * 2 * L + L) == kHost);  // the gap after it
  }
  m.remove(A, tokens[0]);
  CHECK(m.device_of(A + 63 * L) == kHost);
  CHECK(m.device_of(A + 64 * L) == 0);
}

// Lookups racing registration churn on the same address never see a registered region as
// host memory: the entry of the registration they validated against is listed throughout.
static void test_concurrent_churn() {
  DeviceMap m;
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  uint64_t current = m.add(A, L, 2);
  std::thread reader([&] {
    while (!stop.load())
      if (m.device_of(A + L / 2) != 2) wrong++;
  });
  for (int i = 0; i < 20000; ++i) {
    uint64_t next = m.add(A, L, 2);  // re-registration listed first
    m.remove(A, current);            // the previous one delisted late
    current = next;
  }
  stop = true;
  reader.join();
  CHECK(wrong.load() == 0);
  CHECK(m.size() == 1);
}

int main() {
  test_reregister_during_unregister();
  test_refused_registration_leaves_others();
  test_disjoint_lookup();
  test_concurrent_churn();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("DeviceMap tests passed\n");
  return 0;
}
