// C++ tests of WRITEV frames in the transport core: runs of small writes of one batch go out
// coalesced, and the target applies each segment as its own WRITE into host memory, through
// rx staging into (fake) device memory, or not at all when it is refused.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "tcp_node.h"
#include "transport.h"

using namespace tetcp;
using tcp_test::Node;
using tcp_test::options;

namespace {

/** Staging that is plain host memory: the target's "device" region is ordinary memory. */
struct HostStaging : StagingBackend {
  void* alloc(uint64_t bytes, te::Status*, std::string*) override { return std::malloc(bytes); }
  void release(void* p) override { std::free(p); }
  te::Status copy(int, void* dst, const void* src, uint64_t len, std::string*) override {
    std::memcpy(dst, src, len);
    return te::TE_OK;
  }
};

}  // namespace

// 600 writes of 1 B … 70 KiB in one batch, alternating between the target's host region and
// its device region, with two refused (one crossing the host region's end, one into nothing):
// every accepted byte lands where its request said, the gaps and the refused ranges keep
// their old bytes, and each request has its own status.
void test_writev_segments_land_each_on_its_own() {
  HostStaging staging;
  std::vector<uint8_t> host(16 << 20), dev(16 << 20), src(16 << 20);
  Node target(options("target", 0x1111));
  Node init(options("init", 0x2222));
  target.t->set_staging_backend(&staging);
  const uint64_t h0 = reinterpret_cast<uint64_t>(host.data()), d0 = reinterpret_cast<uint64_t>(dev.data()),
                 s0 = reinterpret_cast<uint64_t>(src.data());
  CHECK(target.t->registry().add(h0, host.size(), true) == te::TE_OK);
  CHECK(target.t->registry().add(d0, dev.size(), true) == te::TE_OK);
  target.t->devices().add(d0, dev.size(), 0);
  CHECK(init.t->registry().add(s0, src.size(), false) == te::TE_OK);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 29 + 11);
  for (size_t i = 0; i < host.size(); ++i) host[i] = dev[i] = uint8_t(i * 3 + 1);
  const std::vector<uint8_t> host_before = host, dev_before = dev;
  uint64_t peer = 0;
  peer = init.t->open_peer("127.0.0.1", target.t->port(), 0x1111, "target", false, 1);
  Event e;
  CHECK(init.wait(Event::OPEN, 1, &e) && e.status == te::TE_OK);

  constexpr int kN = 600;
  const uint64_t sizes[] = {1, 100, 4096, 16383, 16384, 16385, 40000, 70000, 7, 65536};
  std::vector<uint8_t> ops(kN, 1);
  std::vector<uint64_t> local(kN), remote(kN), len(kN);
  uint64_t off = 0;
  for (int i = 0; i < kN; ++i) {
    len[i] = sizes[i % 10];
    local[i] = s0 + off;
    remote[i] = (i % 2 ? d0 : h0) + off + 5;  // a gap of 5 bytes before each
    off += len[i] + 5;
  }
  CHECK(off < host.size());
  remote[101] = h0 + host.size() - 10;  // crosses the end: ADDRESS_OUT_OF_RANGE
  remote[302] = 4096;                   // nothing registered there
  uint64_t id = 0;
  std::string err;
  CHECK(init.t->submit(peer, ops.data(), local.data(), remote.data(), len.data(), kN, nullptr, 0, &id, &err) ==
        te::TE_OK);
  CHECK(init.wait(Event::BATCH, id, &e));
  auto b = init.t->take_batch(id);
  CHECK(b != nullptr);
  for (int i = 0; b && i < kN; ++i) {
    const int32_t want = i == 101 ? te::TE_ADDRESS_OUT_OF_RANGE : i == 302 ? te::TE_MEMORY_NOT_REGISTERED : te::TE_OK;
    if (b->statuses[i].load() != want)
      std::printf("  request %d: status %d, expected %d\n", i, b->statuses[i].load(), want);
    CHECK(b->statuses[i].load() == want);
  }
  std::vector<uint8_t> want_host = host_before, want_dev = dev_before;
  for (int i = 0; i < kN; ++i) {
    if (i == 101 || i == 302) continue;
    auto& want = i % 2 ? want_dev : want_host;
    const uint64_t base = i % 2 ? d0 : h0;
    std::memcpy(want.data() + (remote[i] - base), src.data() + (local[i] - s0), len[i]);
  }
  CHECK(host == want_host);
  CHECK(dev == want_dev);
  init.t->close_peer(peer);
}
