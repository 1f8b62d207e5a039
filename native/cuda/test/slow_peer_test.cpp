// The CUDA transport's preparation (bounds checks, imports of a peer's allocations) runs off
// the copy thread, one peer at a time per preparation thread: a peer whose import blocks
// (an fd fetch from a stuck process) delays only its own batches. Runs without a GPU: a
// host-memory backend stands in for CUDA IPC (its imports map the peer's host buffer) and
// the fault-injection runtime for the copies.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "te/cuda/cuda_transport.h"
#include "te/cuda/fault_injection_runtime.h"

using namespace te;
using namespace te::cuda;
using Clock = std::chrono::steady_clock;

namespace {

/** Host-memory stand-in for an IPC backend; opening an allocation of peer "slow" takes 1.5 s. */
class HostBackend : public Backend {
 public:
  const char* name() const override { return "host (test)"; }
  Error export_region(uint64_t addr, uint64_t len, int device, ExportInfo* out) override {
    out->base = addr;
    out->size = len;
    out->device = device;
    return Error::none();
  }
  Error open(const PeerInfo& peer, const RemoteAlloc& alloc, int, Import* out) override {
    if (peer.name == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    out->mapped = alloc.base;  // same process: the peer's memory is ours
    out->size = alloc.size;
    return Error::none();
  }
  void close(Import&) override {}
};

PeerInfo peer_over(const std::string& name, std::vector<uint8_t>& dst) {
  PeerInfo p;
  p.name = name;
  p.epoch = 7;
  RemoteAlloc a;
  a.base = reinterpret_cast<uint64_t>(dst.data());
  a.size = dst.size();
  p.allocs.push_back(a);
  RemoteBuffer b;
  b.addr = a.base;
  b.length = a.size;
  p.buffers.push_back(b);
  return p;
}

}  // namespace

int main() {
  int failures = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::pair<int32_t, Clock::time_point>> done;
  TransportOptions o;
  o.copy.runtime = std::make_shared<FaultInjectionRuntime>();
  CudaTransport t(std::make_shared<HostBackend>(), o, [&](std::shared_ptr<CopyBatch> b) {
    std::lock_guard<std::mutex> l(mu);
    done[b->id] = {b->batch_status, Clock::now()};
    cv.notify_all();
  });
  std::vector<uint8_t> src(4096, 0x5a), to_slow(4096, 0), to_fast(4096, 0);
  ExportInfo info;
  if (!t.register_memory(reinterpret_cast<uint64_t>(src.data()), src.size(), 0, false, &info).ok()) {
    std::fprintf(stderr, "register failed\n");
    return 1;
  }
  uint64_t slow = t.open_peer(peer_over("slow", to_slow));
  uint64_t fast = t.open_peer(peer_over("fast", to_fast));
  uint8_t op = 1;
  uint64_t local = reinterpret_cast<uint64_t>(src.data()), len = 4096;
  uint64_t rs = reinterpret_cast<uint64_t>(to_slow.data()), rf = reinterpret_cast<uint64_t>(to_fast.data());
  uint64_t id_slow = 0, id_fast = 0;
  auto started = Clock::now();
  t.submit(slow, &op, &local, &rs, &len, 1, &id_slow);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the slow import is under way
  t.submit(fast, &op, &local, &rf, &len, 1, &id_fast);
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(10), [&] { return done.count(id_slow) && done.count(id_fast); });
  }
  auto ms = [&](uint64_t id) {
    return done.count(id) ? std::chrono::duration_cast<std::chrono::milliseconds>(done[id].second - started).count()
                          : -1L;
  };
  std::printf("fast peer's batch done after %ld ms, slow peer's after %ld ms\n", ms(id_fast), ms(id_slow));
  if (ms(id_fast) < 0 || ms(id_fast) > 500) {
    std::fprintf(stderr, "FAIL: the fast peer waited for the slow peer's import\n");
    ++failures;
  }
  if (ms(id_slow) < 1400) {
    std::fprintf(stderr, "FAIL: the slow import did not take its time (%ld ms)\n", ms(id_slow));
    ++failures;
  }
  if (done[id_fast].first != TE_OK || done[id_slow].first != TE_OK || to_fast != src || to_slow != src) {
    std::fprintf(stderr, "FAIL: a batch failed or its bytes did not land\n");
    ++failures;
  }
  t.close();
  std::printf("%s\n", failures ? "FAIL" : "ok   slow peer: preparation off the copy thread");
  return failures ? 1 : 0;
}
