// C++ tests of the te core. Plain executable: exits non-zero on the first failed group.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "te/descriptors.h"
#include "te/epoch.h"
#include "te/hmac_sha256.h"
#include "te/memory_registry.h"
#include "te/notify_budget.h"
#include "te/slice_plan.h"
#include "te/status.h"
#include "te/streaming_copy.h"

using namespace te;

static std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

static void test_status_names() {
  CHECK_EQ(std::string(status_name(TE_OK)), "OK");
  CHECK_EQ(std::string(status_name(TE_ADDRESS_OUT_OF_RANGE)), "ADDRESS_OUT_OF_RANGE");
  CHECK_EQ(std::string(status_name(TE_STALE_DESCRIPTOR)), "STALE_DESCRIPTOR");
  CHECK_EQ(std::string(status_name(TE_TRANSFER_FAILED)), "TRANSFER_FAILED");
  CHECK_EQ(std::string(status_name(12345)), "INTERNAL");
}

static void test_registry_basics() {
  MemoryRegistry r;
  CHECK_EQ(r.add(1000, 100, true), TE_OK);
  CHECK_EQ(r.add(2000, 100, false), TE_OK);
  CHECK_EQ(r.add(1050, 10, true), TE_MEMORY_OVERLAP);   // inside
  CHECK_EQ(r.add(950, 51, true), TE_MEMORY_OVERLAP);    // tail overlaps start
  CHECK_EQ(r.add(1099, 10, true), TE_MEMORY_OVERLAP);   // head overlaps end
  CHECK_EQ(r.add(900, 2000, true), TE_MEMORY_OVERLAP);  // covers both
  CHECK_EQ(r.add(1100, 900, true), TE_OK);              // exactly between
  CHECK_EQ(r.add(0, 0, true), TE_INVALID_ARGUMENT);
  CHECK_EQ(r.add(UINT64_MAX - 5, 10, true), TE_INVALID_ARGUMENT);  // wraps
  CHECK_EQ(r.add(UINT64_MAX - 9, 10, true), TE_OK);                // ends exactly at 2^64
  CHECK_EQ(r.size(), 4u);

  CHECK_EQ(r.check(1000, 100, true), TE_OK);
  CHECK_EQ(r.check(1000, 101, true), TE_ADDRESS_OUT_OF_RANGE);
  CHECK_EQ(r.check(1099, 1, true), TE_OK);
  CHECK_EQ(r.check(1099, 2, true), TE_ADDRESS_OUT_OF_RANGE);  // spans two regions: not one region
  CHECK_EQ(r.check(999, 1, true), TE_MEMORY_NOT_REGISTERED);
  CHECK_EQ(r.check(3000, 1, true), TE_MEMORY_NOT_REGISTERED);   // gap
  CHECK_EQ(r.check(2000, 10, true), TE_MEMORY_NOT_REGISTERED);  // local-only, remote asked
  CHECK_EQ(r.check(2000, 10, false), TE_OK);
  CHECK_EQ(r.check(1000, UINT64_MAX, true), TE_ADDRESS_OUT_OF_RANGE);  // overflow
  CHECK_EQ(r.check(1050, UINT64_MAX - 1000, true), TE_ADDRESS_OUT_OF_RANGE);
  CHECK_EQ(r.check(UINT64_MAX - 1, 1, true), TE_OK);
  CHECK_EQ(r.check(UINT64_MAX - 1, 2, true), TE_OK);  // ends exactly at 2^64
  CHECK_EQ(r.check(UINT64_MAX - 1, 3, true), TE_ADDRESS_OUT_OF_RANGE);

  CHECK_EQ(r.remove(1001), TE_MEMORY_NOT_REGISTERED);
  uint64_t len = 0;
  CHECK_EQ(r.remove(1000, &len), TE_OK);
  CHECK_EQ(len, 100u);
  CHECK_EQ(r.check(1000, 1, true), TE_MEMORY_NOT_REGISTERED);
  CHECK_EQ(r.remove(1000), TE_MEMORY_NOT_REGISTERED);
  CHECK_EQ(r.add(1000, 100, true), TE_OK);  // re-registering after removal works
  CHECK_EQ(r.size(), 4u);
}

static void test_registry_lease_fence() {
  MemoryRegistry r;
  CHECK_EQ(r.add(4096, 4096, true), TE_OK);
  Lease lease;
  CHECK_EQ(r.acquire(4096, 16, true, lease), TE_OK);
  CHECK(lease.covers(4100, 10));
  CHECK(!lease.covers(8190, 10));
  std::atomic<bool> removed{false};
  std::thread t([&] {
    r.remove(4096);
    removed = true;
  });
  // The remover has begun once the region refuses new leases (a lease taken before that is
  // given back at once); from then on it can only be waiting for `lease`, whatever the timing.
  Status other_status = TE_OK;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       other_status == TE_OK && std::chrono::steady_clock::now() < until;) {
    Lease other;
    other_status = r.acquire(4096, 16, true, other);
    if (other_status == TE_OK) std::this_thread::yield();
  }
  CHECK_EQ(other_status, TE_MEMORY_NOT_REGISTERED);  // no new leases once removal began
  // A remover that did not wait for leases would return now: give it the CPU a while.
  for (int i = 0; i < 1000 && !removed.load(); ++i) std::this_thread::yield();
  CHECK(!removed.load());  // still leased: unregister must wait
  lease.release();
  t.join();
  CHECK(removed.load());
}

static void test_registry_concurrency() {
  MemoryRegistry r;
  const uint64_t base = 1 << 20, n = 1000, size = 4096;
  for (uint64_t i = 0; i < n; ++i) CHECK_EQ(r.add(base + i * 2 * size, size, true), TE_OK);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0}, bad{0}, missed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&, t] {
      uint64_t x = 12345 + t;
      while (!stop) {
        x = x * 6364136223846793005ull + 1;
        uint64_t i = (x >> 33) % n;
        Lease l;
        Status s = r.acquire(base + i * 2 * size + 8, 64, true, l);
        if (s != TE_OK && s != TE_MEMORY_NOT_REGISTERED) ++bad;
        // Only region 0 is churned: every other one stays registered and must always be found.
        if (i != 0 && (s != TE_OK || !l.covers(base + i * 2 * size + 8, 64))) ++missed;
        ++lookups;
      }
    });
  // Churn a region that readers may hit: writers must not starve under constant lookups.
  // The churn goes on until the readers have made 10^5 lookups beside it (so the two really
  // overlap), with a hang deadline rather than a speed floor: a starved writer, or readers
  // starved by the writer, never get there.
  auto c0 = std::chrono::steady_clock::now();
  const uint64_t lookups0 = lookups.load();
  uint64_t churns = 0;
  double churn_ms = 0;
  while ((churns < 200 || lookups.load() - lookups0 < 100000) && churn_ms < 10000) {
    r.remove(base);
    r.add(base, size, true);
    ++churns;
    churn_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
  }
  const uint64_t overlapped = lookups.load() - lookups0;
  CHECK(churns >= 200 && overlapped >= 100000);
  CHECK_EQ(r.check(base, size, true), TE_OK);  // the churned region ends registered
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  for (auto& th : readers) th.join();
  CHECK_EQ(bad.load(), 0u);
  CHECK_EQ(missed.load(), 0u);
  // 10^5 lookups over 1000 regions, as a batch does them: each finds its own region, and the
  // gaps and range ends between regions are refused. The time is printed, not checked.
  auto t1 = std::chrono::steady_clock::now();
  uint64_t wrong = 0;
  for (uint64_t k = 0; k < 100000; ++k) {
    const uint64_t i = k % n, start = base + i * 2 * size;
    if (r.check(start, 64, true) != TE_OK) ++wrong;
    if (r.check(start + size - 64, 64, true) != TE_OK) ++wrong;                    // last 64 bytes
    if (r.check(start + size - 32, 64, true) != TE_ADDRESS_OUT_OF_RANGE) ++wrong;  // runs past the end
    if (r.check(start + size, 64, true) != TE_MEMORY_NOT_REGISTERED) ++wrong;      // the gap after it
    if (r.check(start - 1, 1, true) != TE_MEMORY_NOT_REGISTERED) ++wrong;          // the byte before it
  }
  CHECK_EQ(wrong, 0u);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  std::printf(
      "  registry: %llu unregister/register beside %llu lookups of 2 busy readers in %.0f ms; 5e5 single-thread "
      "lookups over 1000 regions in %.1f ms\n",
      (unsigned long long)churns, (unsigned long long)overlapped, churn_ms, ms);
}

static void test_slice_plan() {
  const uint64_t MiB = 1 << 20;
  uint64_t lens[] = {10 * MiB + 1, 0, 100, MiB};
  auto plan = plan_slices(lens, 4, 4 * MiB, 2);
  CHECK_EQ(plan.size(), 5u);  // 3 + 0 + 1 + 1
  CHECK_EQ(count_slices(lens, 4, 4 * MiB), 5u);
  // slices of request 0 cover it exactly, in order
  uint64_t off = 0;
  for (auto& s : plan)
    if (s.request == 0) {
      CHECK_EQ(s.offset, off);
      off += s.length;
    }
  CHECK_EQ(off, 10 * MiB + 1);
  CHECK(plan[0].lane != plan[1].lane);  // large request spread over lanes
  for (auto& s : plan) CHECK(s.length > 0 && s.lane < 2);

  // many equal small requests balance evenly
  std::vector<uint64_t> small(1000, 4096);
  auto p2 = plan_slices(small.data(), small.size(), MiB, 4);
  int per[4] = {0};
  for (auto& s : p2) per[s.lane]++;
  for (int l = 0; l < 4; ++l) CHECK_EQ(per[l], 250);
  // a single lane takes everything
  auto p3 = plan_slices(lens, 4, MiB, 1);
  for (auto& s : p3) CHECK_EQ(s.lane, 0u);
  CHECK_EQ(p3.size(), 13u);
}

static void test_sha256() {
  uint8_t d[32];
  sha256("abc", 3, d);
  CHECK_EQ(hex(d, 32), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha256("", 0, d);
  CHECK_EQ(hex(d, 32), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char* m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sha256(m, std::strlen(m), d);
  CHECK_EQ(hex(d, 32), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  Sha256 s;
  for (size_t i = 0; i < million.size(); i += 777)
    s.update(million.data() + i, std::min<size_t>(777, million.size() - i));
  s.finish(d);
  CHECK_EQ(hex(d, 32), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  // RFC 4231 test cases 1, 2 and 6 (key longer than a block)
  uint8_t key1[20];
  std::memset(key1, 0x0b, 20);
  Bytes p1{"Hi There", 8};
  hmac_sha256(key1, 20, &p1, 1, d);
  CHECK_EQ(hex(d, 32), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  Bytes p2[2] = {{"what do ya want ", 16}, {"for nothing?", 12}};  // split parts hash as one message
  hmac_sha256("Jefe", 4, p2, 2, d);
  CHECK_EQ(hex(d, 32), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  uint8_t key6[131];
  std::memset(key6, 0xaa, sizeof key6);
  const char* m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  Bytes p6{m6, std::strlen(m6)};
  hmac_sha256(key6, sizeof key6, &p6, 1, d);
  CHECK_EQ(hex(d, 32), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  CHECK(equal_ct(a, a, 4));
  CHECK(!equal_ct(a, b, 4));
}

static void test_epoch() {
  CHECK(process_epoch() != 0);
  CHECK_EQ(process_epoch(), process_epoch());
  uint8_t x[16] = {0}, y[16] = {0};
  CHECK(random_bytes(x, 16));
  CHECK(random_bytes(y, 16));
  CHECK(std::memcmp(x, y, 16) != 0);
}

static void test_notify_budget_per_peer() {
  NotifyBudget b(2, 1000);
  CHECK(b.admit("a", 10));
  CHECK(b.admit("a", 10));
  CHECK(!b.admit("a", 10));  // a third from one sender: over per-peer, nothing charged
  CHECK_EQ(b.queued("a"), 2u);
  CHECK_EQ(b.bytes(), 20u);
  CHECK(b.admit("b", 10));  // another sender has its own share
  CHECK_EQ(b.queued("b"), 1u);
  b.release("a", 10);
  CHECK(b.admit("a", 10));  // room again once one is taken
  CHECK_EQ(b.bytes(), 30u);
}

static void test_notify_budget_bytes() {
  NotifyBudget b(100, 100);
  CHECK(b.admit("a", 60));
  CHECK(b.admit("b", 40));  // exactly at the limit
  CHECK(!b.admit("c", 1));  // over the byte limit
  CHECK_EQ(b.queued("c"), 0u);
  CHECK_EQ(b.senders(), 2u);  // the refused sender leaves no entry behind
  CHECK_EQ(b.bytes(), 100u);
  CHECK(!b.admit("a", UINT64_MAX));  // a cost that would wrap the count is refused
  CHECK_EQ(b.bytes(), 100u);
  b.release("a", 60);
  CHECK(b.admit("c", 60));
  NotifyBudget none(0, 100);
  CHECK(!none.admit("a", 0));  // a zero per-peer limit admits nothing
  CHECK_EQ(none.senders(), 0u);
}

static void test_notify_budget_release() {
  NotifyBudget b(4, 1000);
  CHECK(b.admit("a", 30));
  b.release("stranger", 30);  // unknown sender: ignored, bytes untouched
  CHECK_EQ(b.bytes(), 30u);
  CHECK_EQ(b.senders(), 1u);
  b.release("a", 500);  // more than charged: clamps at zero
  CHECK_EQ(b.bytes(), 0u);
  CHECK_EQ(b.queued("a"), 0u);
  CHECK_EQ(b.senders(), 0u);  // entry removed at zero
  b.release("a", 30);         // taken twice: the sender is unknown now
  CHECK_EQ(b.bytes(), 0u);
  CHECK(b.admit("a", 10));
  CHECK(b.admit("a", 20));
  b.release("a", 10);
  CHECK_EQ(b.queued("a"), 1u);
  CHECK_EQ(b.bytes(), 20u);
  b.release("a", 20);
  CHECK_EQ(b.senders(), 0u);
  CHECK_EQ(b.bytes(), 0u);
}

static void test_notify_budget_concurrency() {
  NotifyBudget b(1u << 20, UINT64_MAX);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&b, t] {
      const std::string from = "peer" + std::to_string(t % 2);
      for (int i = 0; i < 2000; ++i)
        if (b.admit(from, 8)) b.release(from, 8);
    });
  for (auto& t : ts) t.join();
  CHECK_EQ(b.bytes(), 0u);
  CHECK_EQ(b.senders(), 0u);
}

// streaming_copy: every destination alignment and length, around the 16-byte stores and the
// 64-byte loop, lands exactly the source bytes and nothing before or after them.
static void test_streaming_copy() {
  std::vector<uint8_t> src(4096 + 64), dst(4096 + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + 7);
  for (size_t align = 0; align < 16; ++align) {
    for (size_t n : {0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 129, 512, 1000, 4095, 4096}) {
      for (size_t so = 0; so < 3; ++so) {
        std::fill(dst.begin(), dst.end(), 0xee);
        uint8_t* d = dst.data() + 32 + align;
        streaming_copy(d, src.data() + so, n);
        streaming_fence();
        CHECK(std::memcmp(d, src.data() + so, n) == 0);
        for (uint8_t* p = dst.data(); p < d; ++p) CHECK(*p == 0xee);
        for (uint8_t* p = d + n; p < dst.data() + dst.size(); ++p) CHECK(*p == 0xee);
      }
    }
  }
}

// descriptors: what listeners take for "wait and accept again" (every failure that frees
// itself) against what they take for a broken connection, and the probe for code that never
// sees the failed accept: false with descriptors to spare, true once the soft limit is used up.
static void test_descriptors() {
  for (int err : {EMFILE, ENFILE, ENOBUFS, ENOMEM}) CHECK(accept_starved(err));
  for (int err : {0, EAGAIN, ECONNABORTED, EINTR, EPROTO, EPERM, EBADF, EINVAL}) CHECK(!accept_starved(err));
  CHECK(!descriptors_exhausted());
  rlimit saved{};
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int base = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK(base >= 0);
  std::vector<int> held;
  for (;;) {  // Use the lowest free descriptors up to a limit just above them.
    const int fd = dup(base);
    if (fd < 0) break;
    held.push_back(fd);
    if (held.size() == 8) break;
  }
  CHECK_EQ(held.size(), 8u);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(*std::max_element(held.begin(), held.end()) + 1);
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  // Fill every free descriptor below the limit, then the probe must see none left.
  for (int fd; (fd = dup(base)) >= 0;) held.push_back(fd);
  CHECK(descriptors_exhausted());
  const int last = held.back();
  held.pop_back();
  ::close(last);
  CHECK(!descriptors_exhausted());
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (int fd : held) ::close(fd);
  ::close(base);
}

int main() {
  static const CheckGroup groups[] = {{"status names", test_status_names},
                                      {"registry basics", test_registry_basics},
                                      {"registry lease fence", test_registry_lease_fence},
                                      {"registry concurrency", test_registry_concurrency},
                                      {"slice plan", test_slice_plan},
                                      {"sha256/hmac", test_sha256},
                                      {"epoch", test_epoch},
                                      {"notify budget per peer", test_notify_budget_per_peer},
                                      {"notify budget bytes", test_notify_budget_bytes},
                                      {"notify budget release", test_notify_budget_release},
                                      {"notify budget concurrency", test_notify_budget_concurrency},
                                      {"streaming copy", test_streaming_copy},
                                      {"descriptors", test_descriptors}};
  return run_groups(groups);
}
