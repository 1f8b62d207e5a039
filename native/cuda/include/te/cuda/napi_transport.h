// The N-API surface both CUDA plugins share (header-only: only addons include it). An addon
// defines its Backend and calls `te::cuda::napi::init<Traits>(env, exports)`, where Traits has
//   static constexpr const char* kName;                 // "te:mooncake-intra-nvlink"
//   static std::shared_ptr<Backend> make(Napi::Object options);  // may throw_status
// Arguments are validated in TypeScript; this layer converts them and carries completions
// back through the core's completion bridge.
#pragma once

#include <napi.h>

#include <memory>

#include "te/cuda/cuda_transport.h"
#include "te/cuda/device.h"
#include "te/cuda/napi_device.h"
#include "te/cuda/napi_events.h"
#include "te/napi/transport_wrap.h"

namespace te::cuda::napi {

using te::napi::get_u64;
using te::napi::string_field;
using te::napi::throw_status;
using te::napi::u64_field;

inline Napi::Uint8Array bytes_of(Napi::Env env, const std::vector<uint8_t>& v) {
  auto a = Napi::Uint8Array::New(env, v.size());
  if (!v.empty()) memcpy(a.Data(), v.data(), v.size());
  return a;
}

struct BatchEvent {
  std::shared_ptr<CopyBatch> batch;
};

template <typename Traits>
class CudaTransportWrap : public te::napi::TransportWrap<CudaTransportWrap<Traits>, CudaTransport, BatchEvent> {
  using Base = te::napi::TransportWrap<CudaTransportWrap<Traits>, CudaTransport, BatchEvent>;
  friend Base;
  // Members of a dependent base need naming.
  using Base::bridge_;
  using Base::check_open;
  using Base::closed_;
  using Base::transport_;

 public:
  static Napi::Function Init(Napi::Env env) {
    return Base::DefineClass(env, "CudaTransport",
                             {Base::InstanceMethod("registerMemory", &CudaTransportWrap::RegisterMemory),
                              Base::InstanceMethod("unregisterMemory", &CudaTransportWrap::UnregisterMemory),
                              Base::InstanceMethod("openPeer", &CudaTransportWrap::OpenPeer),
                              Base::InstanceMethod("closePeer", &CudaTransportWrap::ClosePeer),
                              Base::InstanceMethod("submit", &CudaTransportWrap::Submit),
                              Base::InstanceMethod("cancel", &CudaTransportWrap::Cancel),
                              Base::InstanceMethod("importsOpen", &CudaTransportWrap::ImportsOpen),
                              Base::InstanceMethod("close", &CudaTransportWrap::Close)});
  }

  explicit CudaTransportWrap(const Napi::CallbackInfo& info) : Base(info, "new CudaTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object o = info[0].As<Napi::Object>();
    on_batch_ = te::napi::callback_field(info[1].As<Napi::Object>(), "onBatch");
    TransportOptions opt;
    opt.copy.streams_per_device = static_cast<int>(u64_field(o, "streamsPerDevice"));
    opt.copy.slice_bytes = u64_field(o, "sliceBytes");
    std::shared_ptr<Backend> backend = Traits::make(o);
    auto* bridge = this->create_bridge(env, Traits::kName);
    transport_ = std::make_shared<CudaTransport>(
        std::move(backend), opt, [bridge](std::shared_ptr<CopyBatch> b) { bridge->push(BatchEvent{std::move(b)}); });
    this->add_cleanup_hook(env);
  }

 private:
  void deliver(Napi::Env env, BatchEvent& e) {
    CopyBatch& b = *e.batch;
    auto statuses = te::napi::int32_array(env, b.statuses);
    this->unhold(env);
    te::napi::call_on_batch(env, on_batch_, b.id, b.batch_status, statuses, b.bytes, b.error);
  }

  // registerMemory(addr: bigint, length: bigint, device: number, remote: boolean): export info
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[0], "addr");
    uint64_t length = get_u64(info[1], "length");
    int device = static_cast<int>(get_u64(info[2], "device"));
    bool remote = info[3].ToBoolean().Value();
    ExportInfo out;
    Error e = transport_->register_memory(addr, length, device, remote, &out);
    if (!e.ok()) throw_error(env, e);
    Napi::Object r = Napi::Object::New(env);
    r.Set("base", Napi::BigInt::New(env, out.base));
    r.Set("size", Napi::BigInt::New(env, out.size));
    r.Set("device", Napi::Number::New(env, out.device));
    r.Set("handle", bytes_of(env, out.handle));
    r.Set("allocId", Napi::BigInt::New(env, out.alloc_id));
    return r;
  }

  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    return this->unregister_memory(info, "te:cuda:unregister", [](CudaTransport& t, uint64_t addr, std::string* err) {
      Error e = t.unregister_memory(addr);
      *err = e.message;
      return e.status;
    });
  }

  // openPeer({name, epoch, local, socket, allocs: [{base, size, device, handle, allocId}], buffers: [{addr, length,
  // alloc}]}): id
  Napi::Value OpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    Napi::Object o = info[0].As<Napi::Object>();
    PeerInfo p;
    p.name = string_field(o, "name");
    p.epoch = u64_field(o, "epoch");
    p.local = o.Get("local").ToBoolean().Value();
    p.socket = string_field(o, "socket");
    Napi::Array allocs = o.Get("allocs").As<Napi::Array>();
    for (uint32_t i = 0; i < allocs.Length(); ++i) {
      Napi::Object a = allocs.Get(i).As<Napi::Object>();
      RemoteAlloc ra;
      ra.base = u64_field(a, "base");
      ra.size = u64_field(a, "size");
      ra.device = static_cast<int>(u64_field(a, "device"));
      auto h = te::napi::get_bytes(a.Get("handle"), "handle");
      ra.handle.assign(h.data, h.data + h.length);
      ra.alloc_id = u64_field(a, "allocId");
      p.allocs.push_back(std::move(ra));
    }
    Napi::Array buffers = o.Get("buffers").As<Napi::Array>();
    for (uint32_t i = 0; i < buffers.Length(); ++i) {
      Napi::Object bo = buffers.Get(i).As<Napi::Object>();
      RemoteBuffer rb;
      rb.addr = u64_field(bo, "addr");
      rb.length = u64_field(bo, "length");
      rb.alloc = static_cast<uint32_t>(u64_field(bo, "alloc"));
      if (rb.alloc >= p.allocs.size()) throw_status(env, TE_INVALID_ARGUMENT, "buffer refers to an unknown allocation");
      p.buffers.push_back(rb);
    }
    return Napi::Number::New(env, static_cast<double>(transport_->open_peer(std::move(p))));
  }

  // submit(peer, opcodes: Uint8Array, local, remote, lengths: BigUint64Array): batch id
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto batch = te::napi::get_batch(info, 1);
    uint64_t id = 0;
    bridge_->hold(env);
    Error e = transport_->submit(peer, batch.ops.data, batch.local.data, batch.remote.data, batch.lengths.data,
                                 batch.ops.length, &id);
    if (!e.ok()) {
      bridge_->unhold(env);
      throw_error(env, e);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value ImportsOpen(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), closed_ ? 0 : static_cast<double>(transport_->imports_open()));
  }

  /** TransportWrap, once closed: onBatch closes over the JS object that owns this one. */
  void release_callbacks() { on_batch_.Reset(); }

  Napi::FunctionReference on_batch_;
};

/** Exports shared by both CUDA addons. */
template <typename Traits>
void init(Napi::Env env, Napi::Object exports) {
  exports.Set("CudaTransport", CudaTransportWrap<Traits>::Init(env));
  exports.Set("probe", Napi::Function::New(env, Probe));
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  exports.Set("deviceMemory", device_memory_object(env));
  EventsBinding::init(env, exports);
#if TE_HAVE_CUDA
  exports.Set("builtWithCuda", Napi::Boolean::New(env, true));
#else
  exports.Set("builtWithCuda", Napi::Boolean::New(env, false));
#endif
}

}  // namespace te::cuda::napi
