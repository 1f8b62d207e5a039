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
#include "te/cuda/memory_tools.h"
#include "te/napi/completion_bridge.h"
#include "te/napi/values.h"

namespace te::cuda::napi {

using te::napi::get_u64;
using te::napi::throw_status;

[[noreturn]] inline void throw_error(Napi::Env env, const Error& e) { throw_status(env, e.status, e.message); }

inline Napi::Uint8Array bytes_of(Napi::Env env, const std::vector<uint8_t>& v) {
  auto a = Napi::Uint8Array::New(env, v.size());
  if (!v.empty()) memcpy(a.Data(), v.data(), v.size());
  return a;
}

class UnregisterWorker : public Napi::AsyncWorker {
 public:
  UnregisterWorker(Napi::Env env, std::shared_ptr<CudaTransport> t, uint64_t addr)
      : Napi::AsyncWorker(env, "te:cuda:unregister"), deferred_(Napi::Promise::Deferred::New(env)), t_(std::move(t)), addr_(addr) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override { err_ = t_->unregister_memory(addr_); }
  void OnOK() override {
    if (err_.ok()) deferred_.Resolve(Env().Undefined());
    else deferred_.Reject(te::napi::make_error(Env(), err_.status, err_.message));
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<CudaTransport> t_;
  uint64_t addr_;
  Error err_;
};

struct BatchEvent {
  std::shared_ptr<CopyBatch> batch;
};

template <typename Traits>
class TransportWrap : public Napi::ObjectWrap<TransportWrap<Traits>> {
  using Base = Napi::ObjectWrap<TransportWrap<Traits>>;

 public:
  static Napi::Function Init(Napi::Env env) {
    return Base::DefineClass(env, "CudaTransport",
                             {Base::InstanceMethod("registerMemory", &TransportWrap::RegisterMemory),
                              Base::InstanceMethod("unregisterMemory", &TransportWrap::UnregisterMemory),
                              Base::InstanceMethod("openPeer", &TransportWrap::OpenPeer),
                              Base::InstanceMethod("closePeer", &TransportWrap::ClosePeer),
                              Base::InstanceMethod("submit", &TransportWrap::Submit),
                              Base::InstanceMethod("cancel", &TransportWrap::Cancel),
                              Base::InstanceMethod("importsOpen", &TransportWrap::ImportsOpen),
                              Base::InstanceMethod("close", &TransportWrap::Close)});
  }

  explicit TransportWrap(const Napi::CallbackInfo& info) : Base(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsObject())
      throw_status(env, TE_INVALID_ARGUMENT, "new CudaTransport(options, callbacks)");
    Napi::Object o = info[0].As<Napi::Object>();
    on_batch_ = Napi::Persistent(info[1].As<Napi::Object>().Get("onBatch").As<Napi::Function>());
    TransportOptions opt;
    opt.copy.streams_per_device = static_cast<int>(get_u64(o.Get("streamsPerDevice"), "streamsPerDevice"));
    opt.copy.slice_bytes = get_u64(o.Get("sliceBytes"), "sliceBytes");
    std::shared_ptr<Backend> backend = Traits::make(o);
    bridge_ = te::napi::CompletionBridge<BatchEvent>::create(
        env, Traits::kName, [this](Napi::Env env, std::vector<BatchEvent>& events) { deliver(env, events); });
    auto* bridge = bridge_;
    transport_ = std::make_shared<CudaTransport>(std::move(backend), opt,
                                                 [bridge](std::shared_ptr<CopyBatch> b) { bridge->push(BatchEvent{std::move(b)}); });
    napi_add_env_cleanup_hook(env, &TransportWrap::cleanup_hook, this);
    hook_ = true;
  }

  ~TransportWrap() override { shutdown(nullptr); }

 private:
  static void cleanup_hook(void* arg) {
    auto* self = static_cast<TransportWrap*>(arg);
    self->hook_ = false;
    self->shutdown(nullptr);
  }

  void shutdown(napi_env env) {
    if (closed_) return;
    closed_ = true;
    if (transport_) transport_->close();  // joins the copy thread: no producer outlives the bridge
    if (bridge_) bridge_->close(env);
    bridge_ = nullptr;
    if (hook_ && env) napi_remove_env_cleanup_hook(env, &TransportWrap::cleanup_hook, this);
    hook_ = false;
  }

  void check_open(Napi::Env env) {
    if (closed_) throw_status(env, TE_ABORTED, "transport is closed");
  }

  void deliver(Napi::Env env, std::vector<BatchEvent>& events) {
    for (BatchEvent& e : events) {
      Napi::HandleScope scope(env);
      CopyBatch& b = *e.batch;
      auto statuses = Napi::Int32Array::New(env, b.statuses.size());
      for (size_t i = 0; i < b.statuses.size(); ++i) statuses[i] = b.statuses[i];
      if (bridge_) bridge_->unhold(env);
      on_batch_.Call({Napi::Number::New(env, static_cast<double>(b.id)), Napi::Number::New(env, b.batch_status), statuses,
                      Napi::BigInt::New(env, b.bytes), Napi::String::New(env, b.error)});
    }
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
    Napi::Env env = info.Env();
    check_open(env);
    auto* w = new UnregisterWorker(env, transport_, get_u64(info[0], "addr"));
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }

  // openPeer({name, epoch, local, socket, allocs: [{base, size, device, handle, allocId}], buffers: [{addr, length, alloc}]}): id
  Napi::Value OpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    Napi::Object o = info[0].As<Napi::Object>();
    PeerInfo p;
    p.name = o.Get("name").As<Napi::String>().Utf8Value();
    p.epoch = get_u64(o.Get("epoch"), "epoch");
    p.local = o.Get("local").ToBoolean().Value();
    p.socket = o.Get("socket").As<Napi::String>().Utf8Value();
    Napi::Array allocs = o.Get("allocs").As<Napi::Array>();
    for (uint32_t i = 0; i < allocs.Length(); ++i) {
      Napi::Object a = allocs.Get(i).As<Napi::Object>();
      RemoteAlloc ra;
      ra.base = get_u64(a.Get("base"), "base");
      ra.size = get_u64(a.Get("size"), "size");
      ra.device = static_cast<int>(get_u64(a.Get("device"), "device"));
      auto h = te::napi::get_bytes(a.Get("handle"), "handle");
      ra.handle.assign(h.data, h.data + h.length);
      ra.alloc_id = get_u64(a.Get("allocId"), "allocId");
      p.allocs.push_back(std::move(ra));
    }
    Napi::Array buffers = o.Get("buffers").As<Napi::Array>();
    for (uint32_t i = 0; i < buffers.Length(); ++i) {
      Napi::Object bo = buffers.Get(i).As<Napi::Object>();
      RemoteBuffer rb;
      rb.addr = get_u64(bo.Get("addr"), "addr");
      rb.length = get_u64(bo.Get("length"), "length");
      rb.alloc = static_cast<uint32_t>(get_u64(bo.Get("alloc"), "alloc"));
      if (rb.alloc >= p.allocs.size()) throw_status(env, TE_INVALID_ARGUMENT, "buffer refers to an unknown allocation");
      p.buffers.push_back(rb);
    }
    return Napi::Number::New(env, static_cast<double>(transport_->open_peer(std::move(p))));
  }

  Napi::Value ClosePeer(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->close_peer(get_u64(info[0], "peer"));
    return info.Env().Undefined();
  }

  // submit(peer, opcodes: Uint8Array, local, remote, lengths: BigUint64Array): batch id
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto ops = te::napi::get_typed<uint8_t>(info[1], napi_uint8_array, "opcodes");
    auto local = te::napi::get_biguint64(info[2], "localAddrs");
    auto remote = te::napi::get_biguint64(info[3], "remoteAddrs");
    auto lengths = te::napi::get_biguint64(info[4], "lengths");
    if (local.length != ops.length || remote.length != ops.length || lengths.length != ops.length)
      throw_status(env, TE_INVALID_ARGUMENT, "batch arrays must all have the same length");
    uint64_t id = 0;
    bridge_->hold(env);
    Error e = transport_->submit(peer, ops.data, local.data, remote.data, lengths.data, ops.length, &id);
    if (!e.ok()) {
      bridge_->unhold(env);
      throw_error(env, e);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->cancel(get_u64(info[0], "batch"), info[1].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  Napi::Value ImportsOpen(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), closed_ ? 0 : static_cast<double>(transport_->imports_open()));
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    shutdown(info.Env());
    return info.Env().Undefined();
  }

  std::shared_ptr<CudaTransport> transport_;
  te::napi::CompletionBridge<BatchEvent>* bridge_ = nullptr;
  Napi::FunctionReference on_batch_;
  bool closed_ = false;
  bool hook_ = false;
};

inline Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ProbeInfo p = probe();
  Napi::Object o = Napi::Object::New(env);
  o.Set("builtWithCuda", p.built_with_cuda);
  o.Set("toolkitVersion", p.toolkit_version);
  o.Set("runtimeVersion", p.runtime_version);
  o.Set("driverVersion", p.driver_version);
  o.Set("libcudaLoaded", p.libcuda_loaded);
  o.Set("reason", p.no_device_reason);
  Napi::Array devs = Napi::Array::New(env, p.devices.size());
  for (size_t i = 0; i < p.devices.size(); ++i) {
    const DeviceInfo& d = p.devices[i];
    Napi::Object x = Napi::Object::New(env);
    x.Set("ordinal", d.ordinal);
    x.Set("name", d.name);
    x.Set("pciBusId", d.pci_bus_id);
    x.Set("totalMemory", Napi::BigInt::New(env, d.total_memory));
    x.Set("computeCapability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor));
    x.Set("vmm", d.vmm);
    x.Set("fabric", d.fabric);
    x.Set("posixFd", d.posix_fd);
    devs.Set(static_cast<uint32_t>(i), x);
  }
  o.Set("devices", devs);
  return o;
}

inline int device_arg(const Napi::Value& v) { return static_cast<int>(get_u64(v, "device")); }

inline Napi::Value DeviceAlloc(const Napi::CallbackInfo& info) {
  uint64_t out = 0;
  Error e = device_alloc(device_arg(info[0]), get_u64(info[1], "bytes"), &out);
  if (!e.ok()) throw_error(info.Env(), e);
  return Napi::BigInt::New(info.Env(), out);
}
inline Napi::Value DeviceFree(const Napi::CallbackInfo& info) {
  Error e = device_free(device_arg(info[0]), get_u64(info[1], "addr"));
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value CopyToDevice(const Napi::CallbackInfo& info) {
  auto src = te::napi::get_bytes(info[2], "source");
  Error e = copy_to_device(device_arg(info[0]), get_u64(info[1], "dst"), src.data, src.length);
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value CopyToHost(const Napi::CallbackInfo& info) {
  auto dst = te::napi::get_bytes(info[1], "destination");
  Error e = copy_to_host(device_arg(info[0]), dst.data, get_u64(info[2], "src"), dst.length);
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value Memset(const Napi::CallbackInfo& info) {
  Error e = device_memset(device_arg(info[0]), get_u64(info[1], "dst"), static_cast<int>(get_u64(info[2], "value")),
                          get_u64(info[3], "bytes"));
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value BaselineCopy(const Napi::CallbackInfo& info) {
  double s = 0;
  Error e = baseline_copy(device_arg(info[0]), get_u64(info[1], "dst"), get_u64(info[2], "src"), get_u64(info[3], "bytes"),
                          static_cast<int>(get_u64(info[4], "iterations")), &s);
  if (!e.ok()) throw_error(info.Env(), e);
  return Napi::Number::New(info.Env(), s);
}

inline Napi::Value SetErrorFactory(const Napi::CallbackInfo& info) {
  te::napi::addon_data(info.Env()).error_factory = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}
inline Napi::Value StatusName(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), te::status_name(info[0].As<Napi::Number>().Int32Value()));
}

/** Exports shared by both CUDA addons. */
template <typename Traits>
void init(Napi::Env env, Napi::Object exports) {
  exports.Set("CudaTransport", TransportWrap<Traits>::Init(env));
  exports.Set("probe", Napi::Function::New(env, Probe));
  exports.Set("setErrorFactory", Napi::Function::New(env, SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, StatusName));
  Napi::Object mem = Napi::Object::New(env);
  mem.Set("alloc", Napi::Function::New(env, DeviceAlloc));
  mem.Set("free", Napi::Function::New(env, DeviceFree));
  mem.Set("copyToDevice", Napi::Function::New(env, CopyToDevice));
  mem.Set("copyToHost", Napi::Function::New(env, CopyToHost));
  mem.Set("memset", Napi::Function::New(env, Memset));
  mem.Set("baselineCopy", Napi::Function::New(env, BaselineCopy));
  exports.Set("deviceMemory", mem);
#if TE_HAVE_CUDA
  exports.Set("builtWithCuda", Napi::Boolean::New(env, true));
#else
  exports.Set("builtWithCuda", Napi::Boolean::New(env, false));
#endif
}

}  // namespace te::cuda::napi
