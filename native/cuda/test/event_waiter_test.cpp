// The CUDA event waiter on the fault-injection runtime: events reported once the (injected)
// GPU passed them, every synchronous failure returned with its status and no report, a
// failure on the device reported with its status, the pending bound, and close() reporting
// what still waits as ABORTED with no event leaked.
#include "te/cuda/event_waiter.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "check.h"
#include "te/cuda/fault_injection_runtime.h"

using namespace te;
using namespace te::cuda;
using F = FaultInjectionRuntime;

namespace {

/** The reports a waiter made: id -> status, with a wait for a count. */
struct Reports {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, int32_t> status;
  int calls = 0;
  EventWaiter::Done sink() {
    return [this](uint64_t id, const Error& e) {
      std::lock_guard<std::mutex> l(mu);
      status[id] = e.status;
      ++calls;
      cv.notify_all();
    };
  }
  bool wait_for(int n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(10), [&] { return calls >= n; });
  }
};

void events_are_reported_once_ready() {
  auto rt = std::make_shared<F>();
  Reports r;
  EventWaiter w(rt, r.sink());
  rt->pending_polls(20);  // the first queries answer "not ready": the GPU is still working
  uint64_t ids[3] = {};
  for (auto& id : ids) CHECK(w.record(0, 0x5001, &id).ok());
  CHECK(ids[0] != ids[1] && ids[1] != ids[2]);
  CHECK(r.wait_for(3));
  for (auto id : ids) CHECK_EQ(r.status[id], TE_OK);
  CHECK_EQ(r.calls, 3);
  CHECK_EQ(w.pending(), 0u);
  CHECK_EQ(rt->calls(F::RECORD_EVENT), 3);
  CHECK(rt->calls(F::QUERY_EVENT) >= 3);
  // Reported events are reused, not created per record.
  uint64_t again = 0;
  CHECK(w.record(0, 0x5001, &again).ok());
  CHECK(r.wait_for(4));
  CHECK_EQ(rt->calls(F::CREATE_EVENT), 3);
  w.close();
  CHECK_EQ(rt->live_events(), 0);
}

void no_device_is_returned_not_reported() {
  auto rt = std::make_shared<F>();
  Reports r;
  EventWaiter w(rt, r.sink());
  rt->fail_nth(F::SET_DEVICE, 1, TE_NO_DEVICE);
  uint64_t id = 0;
  Error e = w.record(0, 0, &id);
  CHECK_EQ(e.status, TE_NO_DEVICE);
  CHECK(e.message.find("cudaSetDevice") != std::string::npos);
  CHECK_EQ(rt->calls(F::RECORD_EVENT), 0);
  CHECK_EQ(w.pending(), 0u);
  w.close();
  CHECK_EQ(r.calls, 0);
  CHECK_EQ(rt->live_events(), 0);
}

void unrecordable_event_is_returned_and_not_leaked() {
  auto rt = std::make_shared<F>();
  Reports r;
  EventWaiter w(rt, r.sink());
  rt->fail_nth(F::RECORD_EVENT, 1, TE_INVALID_ARGUMENT);
  uint64_t id = 0;
  CHECK_EQ(w.record(0, 0xbad, &id).status, TE_INVALID_ARGUMENT);
  CHECK_EQ(w.pending(), 0u);
  // The event created for it is reused by the next record.
  CHECK(w.record(0, 0x5001, &id).ok());
  CHECK(r.wait_for(1));
  CHECK_EQ(rt->calls(F::CREATE_EVENT), 1);
  w.close();
  CHECK_EQ(r.calls, 1);
  CHECK_EQ(rt->live_events(), 0);
}

void failure_on_the_device_is_reported_with_its_status() {
  auto rt = std::make_shared<F>();
  Reports r;
  EventWaiter w(rt, r.sink());
  rt->fail_nth(F::QUERY_EVENT, 1, TE_TRANSFER_FAILED);
  uint64_t id = 0;
  CHECK(w.record(0, 0x5001, &id).ok());
  CHECK(r.wait_for(1));
  CHECK_EQ(r.status[id], TE_TRANSFER_FAILED);
  CHECK_EQ(w.pending(), 0u);
  w.close();
  CHECK_EQ(rt->live_events(), 0);
}

void pending_events_are_bounded_and_aborted_by_close() {
  auto rt = std::make_shared<F>();
  Reports r;
  EventWaiter w(rt, r.sink(), 2);
  rt->pending_polls(1 << 30);  // never completes
  uint64_t a = 0, b = 0, c = 0;
  CHECK(w.record(0, 0x5001, &a).ok());
  CHECK(w.record(1, 0x5002, &b).ok());
  CHECK_EQ(w.record(0, 0x5001, &c).status, TE_POOL_EXHAUSTED);
  CHECK_EQ(w.pending(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_EQ(r.calls, 0);
  w.close();
  CHECK_EQ(r.calls, 2);
  CHECK_EQ(r.status[a], TE_ABORTED);
  CHECK_EQ(r.status[b], TE_ABORTED);
  CHECK_EQ(w.pending(), 0u);
  CHECK_EQ(rt->live_events(), 0);
  CHECK_EQ(w.record(0, 0x5001, &c).status, TE_ABORTED);
  w.close();  // idempotent
  CHECK_EQ(r.calls, 2);
}

void many_recorders_each_get_one_report() {
  auto rt = std::make_shared<F>();
  Reports r;
  EventWaiter w(rt, r.sink());
  rt->pending_polls(100);
  std::vector<std::thread> ts;
  std::mutex mu;
  std::vector<uint64_t> ids;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) {
        uint64_t id = 0;
        if (w.record(t % 2, 0x5001 + t, &id).ok()) {
          std::lock_guard<std::mutex> l(mu);
          ids.push_back(id);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK_EQ(ids.size(), 1000u);
  CHECK(r.wait_for(1000));
  CHECK_EQ(r.calls, 1000);
  CHECK_EQ(r.status.size(), 1000u);
  for (auto id : ids) CHECK_EQ(r.status[id], TE_OK);
  w.close();
  CHECK_EQ(rt->live_events(), 0);
}

}  // namespace

int main() {
  struct Case {
    const char* name;
    void (*fn)();
  } cases[] = {
      {"events are reported once ready", events_are_reported_once_ready},
      {"no device is returned, not reported", no_device_is_returned_not_reported},
      {"unrecordable event is returned and not leaked", unrecordable_event_is_returned_and_not_leaked},
      {"failure on the device is reported with its status", failure_on_the_device_is_reported_with_its_status},
      {"pending events are bounded and aborted by close", pending_events_are_bounded_and_aborted_by_close},
      {"many recorders each get one report", many_recorders_each_get_one_report},
  };
  for (auto& c : cases) {
    int before = failures;
    c.fn();
    std::printf("%s %s\n", failures == before ? "ok  " : "FAIL", c.name);
  }
  std::printf("%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
