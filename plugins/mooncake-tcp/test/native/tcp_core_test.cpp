// C++ tests of the mooncake-tcp transport core (no N-API): two transports in one process
// talking over loopback. Built and run by scripts/native-test.sh, plain or under
// ThreadSanitizer (`--tsan`), so races between the I/O loops and callers are caught.
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cases.h"
#include "check.h"
#include "loop.h"
#include "recv_buffer.h"
#include "tcp_node.h"
#include "transport.h"

using namespace tetcp;
using tcp_test::Node;
using tcp_test::options;

namespace {

/** Opens a peer of `from` to `to` (expecting `epoch`); returns the OPEN status. */
int32_t open(Node& from, Node& to, uint64_t epoch, uint64_t open_id, uint64_t* peer) {
  *peer = from.t->open_peer("127.0.0.1", to.t->port(), epoch, "target", false, open_id);
  Event e;
  if (!from.wait(Event::OPEN, open_id, &e)) return te::TE_TIMEOUT;
  return e.status;
}

/** Submits one request and waits for the batch; returns its first status (or batch status). */
int32_t transfer(Node& n, uint64_t peer, uint8_t op, uint64_t local, uint64_t remote, uint64_t len) {
  uint64_t id = 0;
  std::string err;
  te::Status s = n.t->submit(peer, &op, &local, &remote, &len, 1, nullptr, 0, &id, &err);
  if (s != te::TE_OK) return s;
  Event e;
  if (!n.wait(Event::BATCH, id, &e)) return te::TE_TIMEOUT;
  auto b = n.t->take_batch(id);
  if (!b) return te::TE_INTERNAL;
  if (b->batch_status.load()) return b->batch_status.load();
  return b->statuses[0].load();
}

void test_write_read_roundtrip() {
  // Memory first: it must outlive the transports (destroyed in reverse order).
  std::vector<uint8_t> tmem(4 << 20), imem(4 << 20);
  Node target(options("target", 0x1111));
  Node init(options("init", 0x2222));
  CHECK(target.t->registry().add(reinterpret_cast<uint64_t>(tmem.data()), tmem.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(reinterpret_cast<uint64_t>(imem.data()), imem.size(), false) == te::TE_OK);
  for (size_t i = 0; i < imem.size(); ++i) imem[i] = uint8_t(i * 7 + 3);
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  const uint64_t t0 = reinterpret_cast<uint64_t>(tmem.data()), i0 = reinterpret_cast<uint64_t>(imem.data());
  CHECK(transfer(init, peer, 1, i0, t0, 3 << 20) == te::TE_OK);
  CHECK(std::memcmp(tmem.data(), imem.data(), 3 << 20) == 0);
  std::memset(imem.data(), 0, imem.size());
  CHECK(transfer(init, peer, 0, i0 + 100, t0 + 50, 100000) == te::TE_OK);
  CHECK(std::memcmp(imem.data() + 100, tmem.data() + 50, 100000) == 0);
  init.t->close_peer(peer);
}

// One batch mixing large and small writes and reads, so large bodies end with the next
// frame's header (a small write's, a read's, another large one's) in the same receive, on
// both sides; every byte must land where its request said.
void test_mixed_sizes_keep_frame_boundaries() {
  std::vector<uint8_t> tmem(8 << 20), imem(8 << 20);
  Node target(options("target", 0x1111, 1, 1));
  Node init(options("init", 0x2222, 1, 1));
  const uint64_t t0 = reinterpret_cast<uint64_t>(tmem.data()), i0 = reinterpret_cast<uint64_t>(imem.data());
  CHECK(target.t->registry().add(t0, tmem.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(i0, imem.size(), false) == te::TE_OK);
  for (size_t i = 0; i < imem.size(); ++i) imem[i] = uint8_t(i * 31 + 7);
  for (size_t i = 0; i < tmem.size(); ++i) tmem[i] = uint8_t(i * 17 + 3);
  const std::vector<uint8_t> tinit = tmem;
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  const uint64_t sizes[] = {20000, 100, 1048581, 16384, 4096, 16383, 300000, 1, 65536};
  constexpr int kN = 2 * int(sizeof sizes / sizeof sizes[0]);
  std::vector<uint8_t> ops(kN);
  std::vector<uint64_t> local(kN), remote(kN), len(kN);
  uint64_t off = 0;
  for (int i = 0; i < kN; ++i) {
    ops[i] = (i / 2) % 2 ? 0 : 1;  // pairs of writes, then pairs of reads
    len[i] = sizes[i % (kN / 2)];
    local[i] = i0 + off;
    remote[i] = t0 + off + 4096;
    off += len[i] + 4096 + 3;  // gaps the requests leave untouched
  }
  CHECK(off + 8192 < tmem.size());
  uint64_t id = 0;
  std::string err;
  CHECK(init.t->submit(peer, ops.data(), local.data(), remote.data(), len.data(), kN, nullptr, 0, &id, &err) ==
        te::TE_OK);
  Event e;
  CHECK(init.wait(Event::BATCH, id, &e));
  auto b = init.t->take_batch(id);
  CHECK(b && b->batch_status.load() == 0);
  for (int i = 0; b && i < kN; ++i) CHECK(b->statuses[i].load() == 0);
  std::vector<uint8_t> expect_t = tinit;
  for (int i = 0; i < kN; ++i) {
    const size_t lo = size_t(local[i] - i0), ro = size_t(remote[i] - t0);
    if (ops[i] == 1) {
      std::memcpy(expect_t.data() + ro, imem.data() + lo, len[i]);  // written to the target
    } else {
      CHECK(std::memcmp(imem.data() + lo, tinit.data() + ro, len[i]) == 0);  // read from it
    }
  }
  CHECK(tmem == expect_t);  // written ranges hold the data, the gaps their old bytes
  init.t->close_peer(peer);
}

// Every lane of a peer with a stale epoch fails permanently, on several loops at once,
// while later submits read the recorded failure (the race this test exists for).
void test_sticky_failure_from_many_lanes() {
  std::vector<uint8_t> imem(4096);
  Node target(options("target", 0x1111));
  Node init(options("init", 0x2222, 16, 4));
  CHECK(init.t->registry().add(reinterpret_cast<uint64_t>(imem.data()), imem.size(), false) == te::TE_OK);
  for (int round = 0; round < 40; ++round) {
    uint64_t peer = 0;
    CHECK(open(init, target, 0x9999, 100 + round, &peer) == te::TE_STALE_DESCRIPTOR);
    std::vector<std::thread> submitters;
    for (int k = 0; k < 2; ++k)
      submitters.emplace_back([&] {
        for (int j = 0; j < 4; ++j)
          CHECK(transfer(init, peer, 1, reinterpret_cast<uint64_t>(imem.data()), 0x1000, 64) ==
                te::TE_STALE_DESCRIPTOR);
      });
    for (auto& th : submitters) th.join();
    init.t->close_peer(peer);
  }
}

/** Blocks every I/O loop of `n` until the returned gate is opened (a stalled target). */
struct Stall {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  size_t entered = 0;
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};
std::shared_ptr<Stall> stall(Node& n) {
  auto g = std::make_shared<Stall>();
  for (size_t i = 0; i < n.t->loop_count(); ++i)
    n.t->loop_for(uint32_t(i))->post([g] {
      std::unique_lock<std::mutex> lock(g->mu);
      ++g->entered;
      g->cv.notify_all();
      g->cv.wait(lock, [&] { return g->open; });
    });
  // Returns once every loop is inside the task (a loop may still handle a ready socket first).
  std::unique_lock<std::mutex> lock(g->mu);
  g->cv.wait(lock, [&] { return g->entered == n.t->loop_count(); });
  return g;
}

// A cancelled batch stuck at a stalled target settles after the grace time with its cancel
// status, without failing a sibling batch on the same lane, and none of its bytes land.
void test_cancel_fails_only_the_cancelled_batch() {
  std::vector<uint8_t> tmem(4 << 20), imem(4 << 20, 0x5a);
  Node target(options("target", 0x1111));
  Node init(options("init", 0x2222, 1, 1));
  const uint64_t t0 = reinterpret_cast<uint64_t>(tmem.data()), i0 = reinterpret_cast<uint64_t>(imem.data());
  CHECK(target.t->registry().add(t0, tmem.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(i0, imem.size(), false) == te::TE_OK);
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  auto gate = stall(target);
  uint8_t op = 1;
  uint64_t len_a = 1 << 20, len_b = 4096, remote_b = t0 + (2 << 20), local_b = i0 + (2 << 20);
  uint64_t a = 0, b = 0;
  std::string err;
  CHECK(init.t->submit(peer, &op, &i0, &t0, &len_a, 1, nullptr, 0, &a, &err) == te::TE_OK);
  CHECK(init.t->submit(peer, &op, &local_b, &remote_b, &len_b, 1, nullptr, 0, &b, &err) == te::TE_OK);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  init.t->cancel(a, te::TE_TIMEOUT);
  Event e;
  CHECK(init.wait(Event::BATCH, a, &e));
  auto ba = init.t->take_batch(a);
  CHECK(ba && ba->cancel_status.load() == te::TE_TIMEOUT);
  gate->release();
  CHECK(init.wait(Event::BATCH, b, &e));
  auto bb = init.t->take_batch(b);
  CHECK(bb && bb->batch_status.load() == 0 && bb->statuses[0].load() == te::TE_OK);
  CHECK(tmem[2 << 20] == 0x5a);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  bool untouched = true;
  for (size_t i = 0; i < len_a; ++i) untouched = untouched && tmem[i] == 0;
  CHECK(untouched);
  init.t->close_peer(peer);
}

// Notifications wait for the JS thread in a bounded queue: beyond notify_queue_per_peer the
// sender's batch fails with POOL_EXHAUSTED; taking one makes room again.
void test_notification_queue_is_bounded() {
  Options to = options("target", 0x1111);
  to.notify_queue_per_peer = 3;
  Node target(to);
  Node init(options("init", 0x2222));
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  auto notify = [&](const char* text) {
    uint64_t id = 0;
    std::string err;
    CHECK(init.t->submit(peer, nullptr, nullptr, nullptr, nullptr, 0, reinterpret_cast<const uint8_t*>(text),
                         std::strlen(text), &id, &err) == te::TE_OK);
    Event e;
    CHECK(init.wait(Event::BATCH, id, &e));
    auto b = init.t->take_batch(id);
    return b ? b->batch_status.load() : int32_t(te::TE_INTERNAL);
  };
  for (int i = 0; i < 3; ++i) CHECK(notify("hello") == te::TE_OK);
  CHECK(notify("one too many") == te::TE_POOL_EXHAUSTED);
  Event e;
  CHECK(target.wait(Event::NOTIFY, 0, &e));
  CHECK(e.text == "init" && e.payload.size() == 5);
  target.t->notification_taken(e.text, e.payload.size());
  CHECK(notify("room again") == te::TE_OK);
  init.t->close_peer(peer);
}

/**
 * Staging without a GPU: "device" memory is host memory the test lists in the DeviceMap,
 * staging buffers come from the heap, and each copy sleeps `delay_ms` first (a device busy
 * with other work). Records when the last copy finished.
 */
struct SlowHostStaging : StagingBackend {
  std::atomic<int> delay_ms{0};
  std::atomic<int> started{0};
  std::atomic<int> copies{0};
  std::atomic<int64_t> last_copy_end{0};
  void* alloc(uint64_t bytes, te::Status*, std::string*) override { return std::malloc(bytes); }
  void release(void* p) override { std::free(p); }
  te::Status copy(int, void* dst, const void* src, uint64_t len, std::string*) override {
    ++started;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    std::memcpy(dst, src, len);
    ++copies;
    last_copy_end.store(now_ms());
    return te::TE_OK;
  }
  /** Waits (up to 10 s) until `n` copies have begun: the state a test means to catch, not a guess at its timing. */
  bool began(int n) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
};

/** Submits one request; returns the batch id (0 on a refused submit). */
uint64_t start(Node& n, uint64_t peer, uint8_t op, uint64_t local, uint64_t remote, uint64_t len) {
  uint64_t id = 0;
  std::string err;
  return n.t->submit(peer, &op, &local, &remote, &len, 1, nullptr, 0, &id, &err) == te::TE_OK ? id : 0;
}

/** Waits for batch `id`; its first status (or batch status), and when it arrived. */
int32_t finish(Node& n, uint64_t id, int64_t* at = nullptr) {
  Event e;
  if (!n.wait(Event::BATCH, id, &e)) return te::TE_TIMEOUT;
  if (at) *at = now_ms();
  auto b = n.t->take_batch(id);
  if (!b) return te::TE_INTERNAL;
  return b->batch_status.load() ? b->batch_status.load() : b->statuses[0].load();
}

// One I/O loop serves both peers of the initiator. A WRITE from device memory whose staging
// copy takes 600 ms must not hold up a host WRITE to the other peer: the copy runs on a
// worker. (When the copy ran on the loop, the host write waited the whole 600 ms.)
void test_slow_staging_stalls_no_other_peer() {
  SlowHostStaging staging;
  std::vector<uint8_t> amem(2 << 20), bmem(2 << 20), dev(1 << 20), host(1 << 20);
  for (size_t i = 0; i < dev.size(); ++i) dev[i] = uint8_t(i * 13 + 1);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 5 + 2);
  Node a(options("a", 0x1111)), b(options("b", 0x3333));
  Node init(options("init", 0x2222, 1, 1));
  init.t->set_staging_backend(&staging);
  const uint64_t a0 = reinterpret_cast<uint64_t>(amem.data()), b0 = reinterpret_cast<uint64_t>(bmem.data());
  const uint64_t d0 = reinterpret_cast<uint64_t>(dev.data()), h0 = reinterpret_cast<uint64_t>(host.data());
  CHECK(a.t->registry().add(a0, amem.size(), true) == te::TE_OK);
  CHECK(b.t->registry().add(b0, bmem.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(d0, dev.size(), false) == te::TE_OK);
  init.t->devices().add(d0, dev.size(), 0);
  CHECK(init.t->registry().add(h0, host.size(), false) == te::TE_OK);
  uint64_t pa = 0, pb = 0;
  CHECK(open(init, a, 0x1111, 1, &pa) == te::TE_OK);
  CHECK(open(init, b, 0x3333, 2, &pb) == te::TE_OK);
  staging.delay_ms = 600;
  const int64_t t0 = now_ms();
  uint64_t slow = start(init, pa, 1, d0, a0, 256 << 10);
  CHECK(staging.began(1));
  uint64_t fast = start(init, pb, 1, h0, b0, 256 << 10);
  int64_t fast_at = 0, slow_at = 0;
  CHECK(finish(init, fast, &fast_at) == te::TE_OK);
  CHECK(finish(init, slow, &slow_at) == te::TE_OK);
  std::printf("  host write to the other peer done after %lld ms, the staged write after %lld ms\n",
              static_cast<long long>(fast_at - t0), static_cast<long long>(slow_at - t0));
  CHECK(fast_at - t0 < 300);
  CHECK(slow_at - t0 >= 600);
  CHECK(std::memcmp(amem.data(), dev.data(), 256 << 10) == 0);
  CHECK(std::memcmp(bmem.data(), host.data(), 256 << 10) == 0);
  init.t->close_peer(pa);
  init.t->close_peer(pb);
}

// A cancelled WRITE whose bytes the target is copying into device memory when the initiator
// revokes the connection: the target confirms only after that copy is done, so the batch
// settles after the last byte of it landed, not while it is still being written.
void test_revoke_waits_for_the_target_device_copy() {
  SlowHostStaging staging;
  std::vector<uint8_t> dev(1 << 20), host(1 << 20, 0x3c);
  Options to = options("target", 0x1111, 2, 1);
  Node target(to);
  target.t->set_staging_backend(&staging);
  Options io = options("init", 0x2222, 1, 1);
  io.cancel_grace_ms = 400;  // the reset comes while the copy runs; the confirmation within the grace
  Node init(io);
  const uint64_t d0 = reinterpret_cast<uint64_t>(dev.data()), h0 = reinterpret_cast<uint64_t>(host.data());
  CHECK(target.t->registry().add(d0, dev.size(), true) == te::TE_OK);
  target.t->devices().add(d0, dev.size(), 0);
  CHECK(init.t->registry().add(h0, host.size(), false) == te::TE_OK);
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  staging.delay_ms = 700;
  uint64_t a = start(init, peer, 1, h0, d0, 1 << 20);
  CHECK(staging.began(1));  // the body arrived; its copy runs
  init.t->cancel(a, te::TE_TIMEOUT);
  int64_t settled_at = 0;
  CHECK(finish(init, a, &settled_at) == te::TE_TIMEOUT);
  CHECK(staging.copies.load() == 1);
  CHECK(settled_at >= staging.last_copy_end.load());
  std::printf("  copy done at +%lld ms before the batch settled\n",
              static_cast<long long>(settled_at - staging.last_copy_end.load()));
  init.t->close_peer(peer);
}

// Every staging path moves the right bytes: WRITE and READ with device memory on the
// initiator (tx and rx staging of a lane), and on the target (rx and tx staging of a server
// connection), across several slices and chunks.
void test_staged_paths_move_the_right_bytes() {
  SlowHostStaging staging;
  staging.delay_ms = 1;
  std::vector<uint8_t> tdev(4 << 20), idev(4 << 20), ihost(4 << 20);
  Options to = options("target", 0x1111);
  to.slice_size = 256 << 10;  // several staging chunks per request
  Node target(to);
  Options io = options("init", 0x2222, 2, 1);
  io.slice_size = 256 << 10;
  Node init(io);
  target.t->set_staging_backend(&staging);
  init.t->set_staging_backend(&staging);
  const uint64_t t0 = reinterpret_cast<uint64_t>(tdev.data()), d0 = reinterpret_cast<uint64_t>(idev.data()),
                 h0 = reinterpret_cast<uint64_t>(ihost.data());
  CHECK(target.t->registry().add(t0, tdev.size(), true) == te::TE_OK);
  target.t->devices().add(t0, tdev.size(), 0);
  CHECK(init.t->registry().add(d0, idev.size(), false) == te::TE_OK);
  init.t->devices().add(d0, idev.size(), 0);
  CHECK(init.t->registry().add(h0, ihost.size(), false) == te::TE_OK);
  for (size_t i = 0; i < idev.size(); ++i) idev[i] = uint8_t(i * 7 + 3);
  for (size_t i = 0; i < ihost.size(); ++i) ihost[i] = uint8_t(i * 11 + 5);
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  // device -> device (lane tx staging, server rx staging)
  CHECK(finish(init, start(init, peer, 1, d0, t0, 1 << 20)) == te::TE_OK);
  CHECK(std::memcmp(tdev.data(), idev.data(), 1 << 20) == 0);
  // host -> device (server rx staging only)
  CHECK(finish(init, start(init, peer, 1, h0 + 4096, t0 + (1 << 20), (1 << 20) + 4096)) == te::TE_OK);
  CHECK(std::memcmp(tdev.data() + (1 << 20), ihost.data() + 4096, (1 << 20) + 4096) == 0);
  // device -> device READ (server tx staging, lane rx staging)
  std::memset(idev.data(), 0, idev.size());
  CHECK(finish(init, start(init, peer, 0, d0 + 8, t0 + 100, 700000)) == te::TE_OK);
  CHECK(std::memcmp(idev.data() + 8, tdev.data() + 100, 700000) == 0);
  // device -> host READ (server tx staging only)
  std::memset(ihost.data(), 0, ihost.size());
  CHECK(finish(init, start(init, peer, 0, h0, t0, 2 << 20)) == te::TE_OK);
  CHECK(std::memcmp(ihost.data(), tdev.data(), 2 << 20) == 0);
  CHECK(staging.copies.load() > 8);
  init.t->close_peer(peer);
}

// A staged WRITE whose peer is closed while its copy runs settles only after the copy: a
// slice is reported done only once nothing touches its memory.
void test_staged_slice_settles_after_its_copy() {
  SlowHostStaging staging;
  std::vector<uint8_t> tmem(1 << 20), dev(1 << 20, 0x33);
  Node target(options("target", 0x1111));
  Node init(options("init", 0x2222, 1, 1));
  init.t->set_staging_backend(&staging);
  const uint64_t t0 = reinterpret_cast<uint64_t>(tmem.data()), d0 = reinterpret_cast<uint64_t>(dev.data());
  CHECK(target.t->registry().add(t0, tmem.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(d0, dev.size(), false) == te::TE_OK);
  init.t->devices().add(d0, dev.size(), 0);
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  staging.delay_ms = 400;
  uint64_t id = start(init, peer, 1, d0, t0, 512 << 10);
  CHECK(staging.began(1));  // closed while the copy runs
  init.t->close_peer(peer);
  int64_t at = 0;
  CHECK(finish(init, id, &at) == te::TE_ABORTED);
  CHECK(staging.last_copy_end.load() != 0 && at >= staging.last_copy_end.load());
}

// With a busy-poll window the loops still move bytes, and an idle loop goes back to sleep:
// 300 ms without traffic cost (almost) no CPU.
void test_busy_poll_window_sleeps_when_idle() {
  std::vector<uint8_t> tmem(1 << 20), imem(1 << 20, 0x42);
  Options to = options("target", 0x1111);
  to.busy_poll_us = 200;
  Node target(to);
  Options io = options("init", 0x2222);
  io.busy_poll_us = 200;
  Node init(io);
  const uint64_t t0 = reinterpret_cast<uint64_t>(tmem.data()), i0 = reinterpret_cast<uint64_t>(imem.data());
  CHECK(target.t->registry().add(t0, tmem.size(), true) == te::TE_OK);
  CHECK(init.t->registry().add(i0, imem.size(), false) == te::TE_OK);
  uint64_t peer = 0;
  CHECK(open(init, target, 0x1111, 1, &peer) == te::TE_OK);
  for (int i = 0; i < 50; ++i) CHECK(transfer(init, peer, 1, i0, t0, 64 << 10) == te::TE_OK);
  CHECK(tmem[(64 << 10) - 1] == 0x42);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the last windows close
  auto cpu_ms = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000.0 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000.0;
  };
  double before = cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  double used = cpu_ms() - before;
  std::printf("  CPU used by 4 idle loops with a 200 µs busy-poll window over 300 ms: %.1f ms\n", used);
  CHECK(used < 60);
  init.t->close_peer(peer);
}

}  // namespace

int main(int argc, char** argv) {
  struct Case {
    const char* name;
    std::function<void()> run;
  } cases[] = {
      {"parse_hello", test_parse_hello},
      {"write_read_roundtrip", test_write_read_roundtrip},
      {"sticky_failure_from_many_lanes", test_sticky_failure_from_many_lanes},
      {"cancel_fails_only_the_cancelled_batch", test_cancel_fails_only_the_cancelled_batch},
      {"notification_queue_is_bounded", test_notification_queue_is_bounded},
      {"slow_staging_stalls_no_other_peer", test_slow_staging_stalls_no_other_peer},
      {"staged_paths_move_the_right_bytes", test_staged_paths_move_the_right_bytes},
      {"staged_slice_settles_after_its_copy", test_staged_slice_settles_after_its_copy},
      {"revoke_waits_for_the_target_device_copy", test_revoke_waits_for_the_target_device_copy},
      {"busy_poll_window_sleeps_when_idle", test_busy_poll_window_sleeps_when_idle},
      {"post_wakes_only_a_sleeping_loop", test_post_wakes_only_a_sleeping_loop},
      {"task_keeps_what_it_holds_through_the_iteration", test_task_keeps_what_it_holds_through_the_iteration},
      {"body_end_brings_next_header", test_body_end_brings_next_header},
      {"after_recv_reads_each_result", test_after_recv_reads_each_result},
      {"receive_mark", test_receive_mark},
      {"congestion_control", test_congestion_control},
      {"mixed_sizes_keep_frame_boundaries", test_mixed_sizes_keep_frame_boundaries},
      {"writev_segments_land_each_on_its_own", test_writev_segments_land_each_on_its_own},
      {"gather_rows_iovecs", test_gather_rows_iovecs},
      {"gathered_writes_land_packed", test_gathered_writes_land_packed},
      {"row_table_of_span", test_row_table_of_span},
      {"scattered_writes_land_in_rows", test_scattered_writes_land_in_rows},
      {"revoke_goes_before_requests", test_revoke_goes_before_requests},
      {"auth_and_revoke_go_before_requests", test_auth_and_revoke_go_before_requests},
  };
  for (auto& c : cases) {
    if (argc > 1 && std::strcmp(argv[1], c.name) != 0) continue;
    int before = failures;
    auto t0 = std::chrono::steady_clock::now();
    c.run();
    long ms =
        long(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    std::printf("%s %s (%ld ms)\n", failures == before ? "ok  " : "FAIL", c.name, ms);
  }
  return failures ? 1 : 0;
}
