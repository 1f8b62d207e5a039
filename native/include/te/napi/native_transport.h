// The N-API glue of a transport whose core speaks te::TransportEvent (mooncake-tcp,
// mooncake-shm, the libfabric layer): the JS callbacks object, the default delivery of
// every event but a batch's, and the methods whose arguments and calls are the same in each
// (submit, host memory in the core's registry). Header-only: only addons include it.
//
// An addon derives from NativeTransportWrap<Derived, Transport> and keeps its own options,
// class table and `deliver_batch(env, id)`, which turns a finished batch into `batch_done`.
#pragma once

#include <string>
#include <vector>

#include "te/napi/transport_wrap.h"
#include "te/transport_event.h"

namespace te::napi {

/**
 * The constructor's callbacks object (declared once in TypeScript as the plugin kit's
 * NativeCallbacks). onBatch is required; the others are read where given, so a transport
 * that never opens peers or checks them passes only what it uses.
 */
struct NativeCallbackRefs {
  Napi::FunctionReference on_batch, on_open, on_notify, on_log, on_check;

  explicit NativeCallbackRefs(const Napi::Object& cb) {
    on_batch = callback_field(cb, "onBatch");
    optional(cb, "onOpen", on_open);
    optional(cb, "onNotify", on_notify);
    optional(cb, "onLog", on_log);
    optional(cb, "onCheck", on_check);
  }
  NativeCallbackRefs() = default;

 private:
  static void optional(const Napi::Object& cb, const char* key, Napi::FunctionReference& ref) {
    Napi::Value v = cb.Get(key);
    if (v.IsFunction()) ref = Napi::Persistent(v.As<Napi::Function>());
  }
};

/**
 * Transport must offer what TransportWrap asks for, plus
 *   submit(peer, ops, local, remote, lengths, n, notify, notify_len, &id, &err) -> Status
 *   notification_taken(from, bytes)
 */
template <typename Derived, typename Transport>
class NativeTransportWrap : public TransportWrap<Derived, Transport, TransportEvent> {
  using Base = TransportWrap<Derived, Transport, TransportEvent>;

 public:
  /** JS thread, one event at a time (called by the completion bridge through TransportWrap). */
  void deliver(Napi::Env env, TransportEvent& e) {
    switch (e.kind) {
      case TransportEvent::BATCH:
        static_cast<Derived*>(this)->deliver_batch(env, e.id);
        break;
      case TransportEvent::OPEN:
        this->unhold(env);
        if (!callbacks_.on_open.IsEmpty()) call_on_status(env, callbacks_.on_open, e.id, e.status, e.text);
        break;
      case TransportEvent::CHECK:
        this->unhold(env);
        if (!callbacks_.on_check.IsEmpty()) call_on_status(env, callbacks_.on_check, e.id, e.status, e.text);
        break;
      case TransportEvent::NOTIFY:
        // Out of the bounded queue before the listeners run (a throwing listener must not leak it).
        if (this->transport_) this->transport_->notification_taken(e.text, e.payload.size());
        if (!callbacks_.on_notify.IsEmpty()) call_on_notify(env, callbacks_.on_notify, e.text, e.payload);
        break;
      case TransportEvent::LOG:
        if (!callbacks_.on_log.IsEmpty())
          callbacks_.on_log.Call({Napi::String::New(env, "warn"), Napi::String::New(env, e.text)});
        break;
    }
  }

  /** TransportWrap, once closed: the callbacks close over the JS object that owns this one. */
  void release_callbacks() { callbacks_ = NativeCallbackRefs(); }

 protected:
  using Method = typename Napi::ObjectWrap<Derived>::PropertyDescriptor;

  /**
   * The JS class: the methods every such transport has (Derived's RegisterMemory,
   * UnregisterMemory and OpenPeer; closePeer, submit, cancel and close from these bases),
   * then the addon's own.
   */
  static Napi::Function define_class(Napi::Env env, const char* name, std::vector<Method> own = {}) {
    using W = Napi::ObjectWrap<Derived>;
    std::vector<Method> methods = {W::InstanceMethod("registerMemory", &Derived::RegisterMemory),
                                   W::InstanceMethod("unregisterMemory", &Derived::UnregisterMemory),
                                   W::InstanceMethod("openPeer", &Derived::OpenPeer),
                                   W::InstanceMethod("closePeer", &Derived::ClosePeer),
                                   W::InstanceMethod("submit", &Derived::Submit),
                                   W::InstanceMethod("cancel", &Derived::Cancel),
                                   W::InstanceMethod("close", &Derived::Close)};
    methods.insert(methods.end(), own.begin(), own.end());
    return W::DefineClass(env, name, methods);
  }

  /** Checks `new X(options, callbacks)` and keeps the callbacks. */
  NativeTransportWrap(const Napi::CallbackInfo& info, const char* usage) : Base(info, usage) {
    callbacks_ = NativeCallbackRefs(info[1].As<Napi::Object>());
  }

  /** Creates the bridge and returns the sink the transport core pushes its events into. */
  TransportEventSink event_sink(Napi::Env env, const char* name) {
    auto* bridge = this->create_bridge(env, name);
    return [bridge](TransportEvent e) { bridge->push(std::move(e)); };
  }

  /** A finished batch, from deliver_batch: releases the bridge's hold and calls onBatch. */
  void batch_done(Napi::Env env, uint64_t id, int32_t status, Napi::Int32Array statuses, uint64_t bytes,
                  const std::string& message, bool remote_may_be_written = false) {
    this->unhold(env);
    call_on_batch(env, callbacks_.on_batch, id, status, statuses, bytes, message, remote_may_be_written);
  }

  /**
   * batch_done for a core batch with `n`, `statuses[i]`, `lengths[i]`, `cancel_status` and
   * `batch_status`: each request's status, the bytes of those that succeeded, and the
   * batch's status (its cancel status where it was cancelled).
   */
  template <typename Batch>
  void batch_done_of(Napi::Env env, uint64_t id, const Batch& b, const std::string& message,
                     bool remote_may_be_written = false) {
    auto statuses = Napi::Int32Array::New(env, b.n);
    uint64_t bytes = 0;
    for (size_t i = 0; i < b.n; ++i) {
      const int32_t st = b.statuses[i].load();
      statuses[i] = st;
      if (st == TE_OK) bytes += b.lengths[i];
    }
    const int32_t cancelled = b.cancel_status;
    const int32_t status = cancelled != 0 ? cancelled : static_cast<int32_t>(b.batch_status);
    batch_done(env, id, status, statuses, bytes, message, remote_may_be_written);
  }

  /**
   * submit(peer, opcodes: Uint8Array, local, remote, lengths: BigUint64Array, notify: Uint8Array | null): number.
   * The bridge is held before the core may finish the batch, and released where it refuses it.
   */
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    this->check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto batch = get_batch(info, 1);
    auto notify = get_notify(info, 5);
    this->bridge_->hold(env);
    uint64_t id = 0;
    std::string err;
    Status s = this->transport_->submit(peer, batch.ops.data, batch.local.data, batch.remote.data, batch.lengths.data,
                                        batch.ops.length, notify.data, notify.length, &id, &err);
    if (s != TE_OK) {
      this->bridge_->unhold(env);
      throw_status(env, s, err);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  NativeCallbackRefs callbacks_;
};

}  // namespace te::napi
