// The N-API face of the CUDA event waiter (header-only: only addons include it), exported by
// both CUDA addons as `events`:
//   events.record(device: number, stream: bigint): Promise<void>
//     records an event on `stream` of cuda:`device` now; resolves once the GPU passed it,
//     rejects with the status (NO_DEVICE without a GPU, TRANSFER_FAILED for a fault on the
//     device, POOL_EXHAUSTED past the pending bound, ABORTED when the env goes away).
//   events.pending(): number   events recorded and not yet settled
// One waiter thread per env, started by the first record; the env's cleanup stops it.
#pragma once

#include <napi.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "te/cuda/event_waiter.h"
#include "te/napi/completion_bridge.h"

namespace te::cuda::napi {

struct EventSettled {
  uint64_t id;
  int32_t status;
  std::string message;
};

class EventsBinding {
 public:
  /** Adds `events` to `exports`; the binding lives until the env is torn down. */
  static void init(Napi::Env env, Napi::Object exports) {
    auto* self = new EventsBinding();
    napi_add_env_cleanup_hook(env, &EventsBinding::cleanup, self);
    Napi::Object o = Napi::Object::New(env);
    o.Set("record", Napi::Function::New(env, &EventsBinding::Record, "record", self));
    o.Set("pending", Napi::Function::New(env, &EventsBinding::Pending, "pending", self));
    exports.Set("events", o);
  }

 private:
  using Bridge = te::napi::CompletionBridge<EventSettled>;

  static Napi::Value Record(const Napi::CallbackInfo& info) {
    auto* self = static_cast<EventsBinding*>(info.Data());
    Napi::Env env = info.Env();
    int device = static_cast<int>(te::napi::get_u64(info[0], "device"));
    uint64_t stream = te::napi::get_u64(info[1], "stream");
    auto deferred = Napi::Promise::Deferred::New(env);
    self->start(env);
    uint64_t id = 0;
    Error e = self->waiter_->record(device, stream, &id);
    if (!e.ok()) {
      deferred.Reject(te::napi::make_error(env, e.status, e.message));
      return deferred.Promise();
    }
    // The waiter thread may already have pushed the report: it is delivered on this
    // thread later, after the deferred is in the map.
    self->waiting_.emplace(id, deferred);
    self->bridge_->hold(env);
    return deferred.Promise();
  }

  static Napi::Value Pending(const Napi::CallbackInfo& info) {
    auto* self = static_cast<EventsBinding*>(info.Data());
    return Napi::Number::New(info.Env(), static_cast<double>(self->waiting_.size()));
  }

  /** JS thread: the bridge and the waiter, on first use (addons that never wait start no thread). */
  void start(Napi::Env env) {
    if (waiter_) return;
    bridge_ = Bridge::create(env, "te:cuda:events", [this](Napi::Env e, std::vector<EventSettled>& settled) {
      for (EventSettled& s : settled) {
        Napi::HandleScope scope(e);
        auto it = waiting_.find(s.id);
        if (it == waiting_.end()) continue;
        Napi::Promise::Deferred d = it->second;
        waiting_.erase(it);
        bridge_->unhold(e);
        if (s.status == TE_OK)
          d.Resolve(e.Undefined());
        else
          d.Reject(te::napi::make_error(e, s.status, s.message));
      }
    });
    Bridge* bridge = bridge_;
    waiter_ = std::make_unique<EventWaiter>(cuda_runtime(), [bridge](uint64_t id, const Error& err) {
      bridge->push(EventSettled{id, err.status, err.message});
    });
  }

  static void cleanup(void* arg) {
    auto* self = static_cast<EventsBinding*>(arg);
    // The waiter thread pushes into the bridge: stop it first, then release the bridge.
    if (self->waiter_) self->waiter_->close();
    if (self->bridge_) self->bridge_->close(nullptr);
    delete self;
  }

  std::unique_ptr<EventWaiter> waiter_;
  Bridge* bridge_ = nullptr;
  std::unordered_map<uint64_t, Napi::Promise::Deferred> waiting_;
};

}  // namespace te::cuda::napi
