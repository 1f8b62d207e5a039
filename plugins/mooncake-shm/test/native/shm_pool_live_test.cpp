// The live part of shm_pool_test: a real target Transport and a raw client that announces
// pools honestly, with a descriptor that is no sealed memfd, and without one. A request on a
// mapped pool is copied with memcpy; on anything else with process_vm_*, never wrongly.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "pools.h"
#include "raw_client.h"
#include "transport.h"

using namespace teshm;

namespace {

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}

bool same(const uint8_t* a, const uint8_t* b, size_t n) { return std::memcmp(a, b, n) == 0; }

/** Waits (up to 2 s) until the target processed what was sent: the count reaches `want`. */
bool until(const std::function<uint64_t()>& now, uint64_t want) {
  for (int i = 0; i < 2000 && now() != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return now() == want;
}

}  // namespace

void test_live_pools() {
  std::atomic<int> logs{0};
  std::vector<uint8_t> memory(1 << 16, 0);
  Options o;
  o.segment_name = "pool-target";
  o.epoch = 91;
  o.socket_name = "te-shm-pool-test/" + std::to_string(getpid());
  Transport t(o, [&](Event e) { logs += e.kind == Event::LOG; });
  std::string err;
  CHECK(t.start(&err) == te::TE_OK);
  const uint64_t base = reinterpret_cast<uint64_t>(memory.data());
  CHECK(t.registry().add(base, memory.size(), true) == te::TE_OK);
  RawClient c(o.socket_name, o.epoch);
  CHECK(c.fd >= 0);
  LocalPools pools;
  std::shared_ptr<LocalPool> pool;
  CHECK(pools.allocate(1 << 16, &pool, &err) == te::TE_OK);
  auto* pb = reinterpret_cast<uint8_t*>(pool->base);
  fill(pb, pool->len, 3);
  std::vector<uint8_t> msg;
  const uint64_t mapped0 = peer_pools_mapped();
  encode_pool(PoolAd{pool->id, pool->base, pool->len}, &msg);
  CHECK(send_message(c.fd, msg, pool->fd) > 0);

  // A write and a read on the pool: memcpy through the target's mapping, byte for byte.
  ServerStats s0 = t.server_stats();
  CHECK(c.request(Request{1, 1, OP_WRITE, pool->base + 100, base + 3, 5000, pool->id}) == te::TE_OK);
  CHECK(same(memory.data() + 3, pb + 100, 5000) && memory[2] == 0 && memory[5003] == 0);
  fill(memory.data() + 20000, 3000, 90);
  CHECK(c.request(Request{2, 1, OP_READ, pool->base + 7001, base + 20000, 3000, pool->id}) == te::TE_OK);
  CHECK(same(pb + 7001, memory.data() + 20000, 3000));
  ServerStats s1 = t.server_stats();
  CHECK(s1.pool_chunks == s0.pool_chunks + 2 && s1.process_vm_chunks == s0.process_vm_chunks);
  CHECK(s1.pools_mapped == mapped0 + 1);

  // A range that runs past the pool it names is left to process_vm_*, which copies what this
  // process really has there (whatever is mapped after the pool) or reports the fault typed.
  int32_t past = c.request(Request{3, 1, OP_WRITE, pool->base + pool->len - 10, base, 100, pool->id});
  CHECK(past == te::TE_OK || past == te::TE_ADDRESS_OUT_OF_RANGE);
  if (past == te::TE_OK) CHECK(same(memory.data(), pb + pool->len - 10, 10));
  CHECK(t.server_stats().pool_chunks == s1.pool_chunks);
  CHECK(t.server_stats().process_vm_chunks == s1.process_vm_chunks + 1);

  // A descriptor that is no sealed memfd is not mapped (logged); its requests still land.
  int logged = logs.load();
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  CHECK(ftruncate(unsealed, 1 << 16) == 0);
  void* um = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, unsealed, 0);
  CHECK(um != MAP_FAILED);
  auto* ub = static_cast<uint8_t*>(um);
  fill(ub, 1 << 16, 41);
  encode_pool(PoolAd{50, reinterpret_cast<uint64_t>(ub), 1 << 16}, &msg);
  CHECK(send_message(c.fd, msg, unsealed) > 0);
  ServerStats s2 = t.server_stats();
  CHECK(c.request(Request{4, 2, OP_WRITE, reinterpret_cast<uint64_t>(ub) + 5, base + 40000, 4096, 50}) == te::TE_OK);
  CHECK(same(memory.data() + 40000, ub + 5, 4096));
  CHECK(t.server_stats().process_vm_chunks == s2.process_vm_chunks + 1 && t.server_stats().pools_mapped == mapped0 + 1);
  CHECK(logs.load() > logged);

  // POOL_GONE drops the mapping; a later request naming the pool goes through process_vm_*.
  encode_pool_gone(pool->id, &msg);
  CHECK(send_message(c.fd, msg) > 0);
  CHECK(until([] { return peer_pools_mapped(); }, mapped0));
  ServerStats s3 = t.server_stats();
  CHECK(c.request(Request{5, 3, OP_WRITE, pool->base, base + 50000, 2048, pool->id}) == te::TE_OK);
  CHECK(same(memory.data() + 50000, pb, 2048) && t.server_stats().process_vm_chunks == s3.process_vm_chunks + 1);

  // POOL without its memfd drops the connection (logged); the target lives on.
  logged = logs.load();
  encode_pool(PoolAd{60, pool->base, pool->len}, &msg);
  CHECK(send_message(c.fd, msg) > 0);
  std::vector<uint8_t> buf;
  CHECK(recv_wait(c.fd, &buf) == 0);
  CHECK(logs.load() > logged);
  RawClient again(o.socket_name, o.epoch);
  CHECK(again.fd >= 0);
  munmap(um, 1 << 16);
  close(unsealed);
  t.close();
}
