// close() beside an unregisterMemory in progress: the unregistration revokes the region at
// every peer that said hello, through rail 0's address vector and endpoint, and close()
// closes both. close() therefore waits for it (the revocation is bounded: 1 s for a peer
// that does not answer), where it used to go ahead and close the rail under the revocation.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "transport_test_node.h"

using namespace fabric_test;

void test_close_waits_for_an_unregistration() {
  Node a("revoking", 61), b("silent", 62);
  if (!a.ok || !b.ok) {
    fprintf(stderr, "transport_test: a second pair of transports could not start, close-race case not run\n");
    return;
  }
  static std::vector<uint8_t> region(64 * 1024, 0x3c);
  std::vector<uint64_t> keys;
  uint64_t base = 0;
  std::string err;
  const uint64_t addr = reinterpret_cast<uint64_t>(region.data());
  CHECK(a.t->register_memory(addr, region.size(), true, &keys, &base, &err) == te::TE_OK);  // published
  // b says hello to a, so a will ask b to drop the region; then b stops answering.
  PeerAddress pa;
  pa.rails = {a.rail().pub.addr};
  pa.virt_addr = {a.rail().pub.virt_addr};
  pa.provider = a.rail().pub.provider;
  size_t opens = b.count(Event::OPEN);
  b.t->open_peer("revoking", 61, pa, false, {});
  CHECK(b.wait_for(Event::OPEN, opens + 1));
  {
    std::lock_guard<std::mutex> l(a.m().known_mu);
    CHECK(a.m().known.size() == 1);
  }
  b.stop_rail_thread();

  using clock = std::chrono::steady_clock;
  std::atomic<int64_t> unregistered_at{0};
  std::thread unregistering([&] {
    std::string e;
    CHECK(a.t->unregister_memory(addr, &e) == te::TE_OK);
    unregistered_at.store(clock::now().time_since_epoch().count());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the revocation waits on b
  a.t->close();
  const int64_t closed_at = clock::now().time_since_epoch().count();
  unregistering.join();
  CHECK(unregistered_at.load() != 0 && closed_at >= unregistered_at.load());
  b.t->close();
}
