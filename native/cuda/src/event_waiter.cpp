#include "te/cuda/event_waiter.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace te::cuda {

namespace {
// Spare events kept at most (beyond that they are destroyed when reported).
constexpr size_t kMaxSpare = 256;
// Poll interval bounds: short right after a completion (layers finish back to back), growing
// while nothing completes so an idle wait costs little CPU.
constexpr auto kMinPoll = std::chrono::microseconds(10);
constexpr auto kMaxPoll = std::chrono::microseconds(500);
}  // namespace

EventWaiter::EventWaiter(std::shared_ptr<CopyRuntime> runtime, Done done, size_t max_pending)
    : rt_(std::move(runtime)), done_(std::move(done)), max_pending_(max_pending) {}

EventWaiter::~EventWaiter() { close(); }

Error EventWaiter::record(int device, uint64_t stream, uint64_t* id) {
  std::unique_lock<std::mutex> l(mu_);
  if (closing_) return Error::make(TE_ABORTED, "the CUDA event waiter is closed");
  if (outstanding_ >= max_pending_) {
    return Error::make(TE_POOL_EXHAUSTED,
                       std::to_string(outstanding_) + " CUDA events are pending (the limit): wait for earlier ones");
  }
  if (device < 0) return Error::make(TE_INVALID_ARGUMENT, "device must be a GPU ordinal");
  void* ev = nullptr;
  auto spare = std::find_if(spare_.begin(), spare_.end(), [&](const auto& s) { return s.first == device; });
  if (spare != spare_.end()) {
    ev = spare->second;
    spare_.erase(spare);
  }
  l.unlock();
  // The stream belongs to `device`: it must be current for the record (and for a create).
  Error e = rt_->set_device(device);
  if (e.ok() && ev == nullptr) e = rt_->create_event(&ev);
  if (e.ok()) e = rt_->record_event(ev, reinterpret_cast<void*>(static_cast<uintptr_t>(stream)));
  l.lock();
  if (!e.ok()) {
    if (ev != nullptr) {
      l.unlock();
      recycle(device, ev);
    }
    return e;
  }
  if (closing_) {
    l.unlock();
    recycle(device, ev);
    return Error::make(TE_ABORTED, "the CUDA event waiter is closed");
  }
  *id = next_id_++;
  ++outstanding_;
  queue_.push_back(Pending{*id, device, ev});
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
  return Error::none();
}

size_t EventWaiter::pending() const {
  std::lock_guard<std::mutex> l(mu_);
  return outstanding_;
}

void EventWaiter::recycle(int device, void* event) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!closing_ && spare_.size() < kMaxSpare) {
      spare_.emplace_back(device, event);
      return;
    }
  }
  rt_->destroy_event(event);
}

void EventWaiter::run() {
  std::vector<Pending> waiting;
  int current = -1;
  auto poll = kMinPoll;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (waiting.empty()) cv_.wait(l, [&] { return closing_ || !queue_.empty(); });
      if (closing_) break;
      for (auto& p : queue_) waiting.push_back(p);
      queue_.clear();
    }
    bool progressed = false;
    for (size_t i = 0; i < waiting.size();) {
      Pending p = waiting[i];
      Error e = Error::none();
      if (p.device != current) {
        e = rt_->set_device(p.device);
        if (e.ok()) current = p.device;
      }
      bool ready = true;
      if (e.ok()) e = rt_->query_event(p.event, &ready);
      if (e.ok() && !ready) {
        ++i;
        continue;
      }
      // Recorded in order per stream, but streams differ: report each as it completes.
      waiting[i] = waiting.back();
      waiting.pop_back();
      progressed = true;
      recycle(p.device, p.event);
      {
        std::lock_guard<std::mutex> l(mu_);
        --outstanding_;
      }
      done_(p.id, e);
    }
    if (waiting.empty()) {
      poll = kMinPoll;
      continue;
    }
    poll = progressed ? kMinPoll : std::min(poll * 2, std::chrono::duration_cast<std::chrono::microseconds>(kMaxPoll));
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, poll, [&] { return closing_ || !queue_.empty(); });
  }
  // Closing: whatever still waits is reported ABORTED (its GPU work may still run; nobody
  // waits for it any more).
  std::vector<Pending> rest;
  {
    std::lock_guard<std::mutex> l(mu_);
    rest.swap(queue_);
  }
  for (auto& p : rest) waiting.push_back(p);
  for (auto& p : waiting) {
    rt_->destroy_event(p.event);
    {
      std::lock_guard<std::mutex> l(mu_);
      --outstanding_;
    }
    done_(p.id, Error::make(TE_ABORTED, "the CUDA event waiter closed before the event completed"));
  }
}

void EventWaiter::close() {
  std::vector<std::pair<int, void*>> spare;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closing_ && !thread_.joinable()) return;
    closing_ = true;
    spare.swap(spare_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& s : spare) rt_->destroy_event(s.second);
}

}  // namespace te::cuda
