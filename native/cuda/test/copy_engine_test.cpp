// The copy engine on the fault-injection runtime: every error path a GPU can take (a copy
// refused when issued, a device that cannot be made current, a copy that fails on the
// device, an event that cannot be recorded) runs here without a GPU. Each case checks
// statuses, the batch status, the bytes reported, and the destination memory itself.
#include "te/cuda/copy_engine.h"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "check.h"
#include "te/cuda/fault_injection_runtime.h"

using namespace te;
using namespace te::cuda;
using F = FaultInjectionRuntime;

namespace {

/** Host buffers for `n` requests of `len` bytes: sources filled, destinations zero. */
struct Fixture {
  size_t n, len;
  std::vector<std::vector<uint8_t>> src, dst;
  Fixture(size_t n_, size_t len_) : n(n_), len(len_), src(n_), dst(n_) {
    for (size_t i = 0; i < n; ++i) {
      src[i].assign(len, static_cast<uint8_t>(0x10 + i));
      dst[i].assign(len, 0);
    }
  }
  std::shared_ptr<CopyBatch> batch(uint64_t id) {
    auto b = std::make_shared<CopyBatch>();
    b->id = id;
    for (size_t i = 0; i < n; ++i) {
      b->opcodes.push_back(1);
      b->local.push_back(reinterpret_cast<uint64_t>(src[i].data()));
      b->remote.push_back(reinterpret_cast<uint64_t>(dst[i].data()));
      b->lengths.push_back(len);
      b->statuses.push_back(kPending);
      CopyOp op;
      op.dst = reinterpret_cast<uint64_t>(dst[i].data());
      op.src = reinterpret_cast<uint64_t>(src[i].data());
      op.len = len;
      op.index = static_cast<uint32_t>(i);
      b->ops.push_back(op);
    }
    return b;
  }
  bool landed(size_t i) const { return dst[i] == src[i]; }
  bool untouched(size_t i) const {
    for (uint8_t x : dst[i])
      if (x != 0) return false;
    return true;
  }
};

/** Runs one batch through a fresh engine on `rt` and returns it once done. */
std::shared_ptr<CopyBatch> run(const std::shared_ptr<F>& rt, std::shared_ptr<CopyBatch> b, uint64_t slice = 0,
                               bool cancel_first = false) {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<CopyBatch> out;
  CopyEngineOptions o;
  o.streams_per_device = 2;
  o.slice_bytes = slice;
  o.runtime = rt;
  {
    CopyEngine engine(o, [&](std::shared_ptr<CopyBatch> done) {
      std::lock_guard<std::mutex> l(mu);
      out = std::move(done);
      cv.notify_all();
    });
    if (cancel_first) b->cancel_status.store(TE_TIMEOUT);
    engine.submit(b);
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(5), [&] { return out != nullptr; });
  }
  return out;
}

void all_copies_land() {
  auto rt = std::make_shared<F>();
  Fixture f(4, 3000);
  rt->pending_polls(5);
  auto b = run(rt, f.batch(1), 1024);  // 3 slices per request
  CHECK(b != nullptr);
  if (!b) return;
  CHECK_EQ(b->batch_status, TE_OK);
  for (size_t i = 0; i < 4; ++i) {
    CHECK_EQ(b->statuses[i], TE_OK);
    CHECK(f.landed(i));
  }
  CHECK_EQ(b->bytes, 4u * 3000u);
  CHECK_EQ(rt->calls(F::COPY), 12);
  CHECK_EQ(rt->live_streams(), 0);  // destroyed when the engine stopped
  CHECK_EQ(rt->live_events(), 0);
}

void last_copy_refused_fails_its_request_and_the_batch() {
  auto rt = std::make_shared<F>();
  Fixture f(4, 4096);
  rt->fail_nth(F::COPY, 4);
  auto b = run(rt, f.batch(2));
  CHECK(b != nullptr);
  if (!b) return;
  CHECK_EQ(b->statuses[3], TE_TRANSFER_FAILED);
  CHECK(f.untouched(3));
  for (size_t i = 0; i < 3; ++i) CHECK_EQ(b->statuses[i], TE_OK);
  CHECK_EQ(b->batch_status, TE_TRANSFER_FAILED);
  CHECK_EQ(b->bytes, 3u * 4096u);
  CHECK(b->error.find("cudaMemcpyAsync failed") != std::string::npos);
}

void copy_refused_midway_fails_the_request() {
  auto rt = std::make_shared<F>();
  Fixture f(2, 4096);
  rt->fail_nth(F::COPY, 2);  // the second slice of request 0
  auto b = run(rt, f.batch(3), 1024);
  CHECK(b != nullptr);
  if (!b) return;
  CHECK_EQ(b->statuses[0], TE_TRANSFER_FAILED);
  CHECK_EQ(b->statuses[1], TE_OK);
  CHECK(f.landed(1));
  CHECK_EQ(b->batch_status, TE_TRANSFER_FAILED);
  CHECK_EQ(b->bytes, 4096u);
}

void device_unusable_fails_with_its_status() {
  auto rt = std::make_shared<F>();
  Fixture f(3, 512);
  rt->fail_nth(F::SET_DEVICE, 3, TE_NO_DEVICE);  // the last request's device
  auto b = run(rt, f.batch(4));
  CHECK(b != nullptr);
  if (!b) return;
  CHECK_EQ(b->statuses[2], TE_NO_DEVICE);
  CHECK(f.untouched(2));
  CHECK_EQ(b->statuses[0], TE_OK);
  CHECK_EQ(b->batch_status, TE_NO_DEVICE);
  CHECK_EQ(b->bytes, 2u * 512u);
}

void stream_creation_fails() {
  auto rt = std::make_shared<F>();
  Fixture f(2, 512);
  rt->fail_nth(F::CREATE_STREAM, 1);
  auto b = run(rt, f.batch(5));
  CHECK(b != nullptr);
  if (!b) return;
  CHECK(b->statuses[0] != TE_OK);
  CHECK(f.untouched(0));
  CHECK_EQ(b->batch_status == TE_OK, false);
  CHECK(b->bytes <= 512u);
}

void copy_failing_on_the_device_fails_every_request() {
  auto rt = std::make_shared<F>();
  Fixture f(3, 2048);
  rt->fail_nth(F::QUERY_EVENT, 1);
  auto b = run(rt, f.batch(6));
  CHECK(b != nullptr);
  if (!b) return;
  for (size_t i = 0; i < 3; ++i) CHECK_EQ(b->statuses[i], TE_TRANSFER_FAILED);
  CHECK_EQ(b->batch_status, TE_TRANSFER_FAILED);
  CHECK_EQ(b->bytes, 0u);
}

void unrecordable_event_falls_back_to_a_stream_wait() {
  auto rt = std::make_shared<F>();
  Fixture f(2, 1024);
  rt->fail_nth(F::RECORD_EVENT, 1);
  auto b = run(rt, f.batch(7));
  CHECK(b != nullptr);
  if (!b) return;
  CHECK_EQ(b->batch_status, TE_OK);
  CHECK_EQ(b->bytes, 2048u);
  CHECK(rt->calls(F::SYNCHRONIZE) >= 1);
  // And when that wait fails too, nothing is reported as landed.
  auto rt2 = std::make_shared<F>();
  Fixture g(2, 1024);
  rt2->fail_nth(F::RECORD_EVENT, 1);
  rt2->fail_nth(F::SYNCHRONIZE, 1);
  auto c = run(rt2, g.batch(8));
  CHECK(c != nullptr);
  if (!c) return;
  CHECK_EQ(c->batch_status, TE_TRANSFER_FAILED);
  CHECK_EQ(c->bytes, 0u);
}

void cancelled_before_issue_copies_nothing() {
  auto rt = std::make_shared<F>();
  Fixture f(2, 1024);
  auto b = run(rt, f.batch(9), 0, true);
  CHECK(b != nullptr);
  if (!b) return;
  CHECK_EQ(b->batch_status, TE_TIMEOUT);
  CHECK_EQ(b->statuses[0], TE_TIMEOUT);
  CHECK_EQ(b->bytes, 0u);
  CHECK(f.untouched(0) && f.untouched(1));
  CHECK_EQ(rt->calls(F::COPY), 0);
}

}  // namespace

int main() {
  struct Case {
    const char* name;
    void (*fn)();
  } cases[] = {
      {"all copies land", all_copies_land},
      {"last copy refused fails its request and the batch", last_copy_refused_fails_its_request_and_the_batch},
      {"copy refused midway fails the request", copy_refused_midway_fails_the_request},
      {"device unusable fails with its status", device_unusable_fails_with_its_status},
      {"stream creation fails", stream_creation_fails},
      {"copy failing on the device fails every request", copy_failing_on_the_device_fails_every_request},
      {"unrecordable event falls back to a stream wait", unrecordable_event_falls_back_to_a_stream_wait},
      {"cancelled before issue copies nothing", cancelled_before_issue_copies_nothing},
  };
  for (auto& c : cases) {
    int before = failures;
    c.fn();
    std::printf("%s %s\n", failures == before ? "ok  " : "FAIL", c.name);
  }
  std::printf("%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
