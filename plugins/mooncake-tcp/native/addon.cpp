// N-API surface of mooncake-tcp (declared for TypeScript in src/binding.ts). Arguments are
// validated in TypeScript; this layer converts them, runs the transport and carries its
// events back through a thread-safe function.
#include <napi.h>

#include <memory>
#include <unordered_map>

#include "cuda_staging.h"
#include "te/cuda/device.h"
#include "te/cuda/memory_tools.h"
#include "te/epoch.h"
#include "te/napi/completion_bridge.h"
#include "te/napi/values.h"
#include "transport.h"

namespace {

using te::napi::get_u64;
using te::napi::throw_status;
using tetcp::Event;

class UnregisterWorker : public Napi::AsyncWorker {
 public:
  UnregisterWorker(Napi::Env env, std::shared_ptr<tetcp::Transport> t, uint64_t addr, std::function<void()> done)
      : Napi::AsyncWorker(env, "te:mooncake-tcp:unregister"),
        deferred_(Napi::Promise::Deferred::New(env)),
        t_(std::move(t)),
        addr_(addr),
        done_(std::move(done)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    status_ = t_->registry().remove(addr_);  // waits until no access to it is in flight
    if (status_ == te::TE_OK) t_->devices().remove(addr_);
  }
  void OnOK() override {
    if (status_ == te::TE_OK) {
      done_();
      deferred_.Resolve(Env().Undefined());
    } else {
      deferred_.Reject(te::napi::make_error(Env(), status_, "no registered memory starts at 0x" + hex(addr_)));
    }
  }
  static std::string hex(uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
    return b;
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<tetcp::Transport> t_;
  uint64_t addr_;
  std::function<void()> done_;
  int32_t status_ = 0;
};

class TcpTransport : public Napi::ObjectWrap<TcpTransport> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "TcpTransport",
                       {InstanceMethod("port", &TcpTransport::Port),
                        InstanceMethod("registerMemory", &TcpTransport::RegisterMemory),
                        InstanceMethod("unregisterMemory", &TcpTransport::UnregisterMemory),
                        InstanceMethod("openPeer", &TcpTransport::OpenPeer),
                        InstanceMethod("closePeer", &TcpTransport::ClosePeer),
                        InstanceMethod("submit", &TcpTransport::Submit),
                        InstanceMethod("cancel", &TcpTransport::Cancel),
                        InstanceMethod("close", &TcpTransport::Close)});
  }

  explicit TcpTransport(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TcpTransport>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsObject())
      throw_status(env, te::TE_INVALID_ARGUMENT, "new TcpTransport(options, callbacks)");
    Napi::Object o = info[0].As<Napi::Object>();
    Napi::Object cb = info[1].As<Napi::Object>();
    on_batch_ = Napi::Persistent(cb.Get("onBatch").As<Napi::Function>());
    on_open_ = Napi::Persistent(cb.Get("onOpen").As<Napi::Function>());
    on_notify_ = Napi::Persistent(cb.Get("onNotify").As<Napi::Function>());

    tetcp::Options opt;
    opt.segment_name = o.Get("segmentName").As<Napi::String>().Utf8Value();
    opt.epoch = get_u64(o.Get("epoch"), "epoch");
    opt.bind_address = o.Get("bindAddress").As<Napi::String>().Utf8Value();
    opt.port = static_cast<uint16_t>(get_u64(o.Get("port"), "port"));
    opt.io_threads = static_cast<int>(get_u64(o.Get("ioThreads"), "ioThreads"));
    opt.lanes = static_cast<int>(get_u64(o.Get("lanesPerPeer"), "lanesPerPeer"));
    opt.connect_timeout_ms = static_cast<int>(get_u64(o.Get("connectTimeoutMs"), "connectTimeoutMs"));
    opt.slice_size = get_u64(o.Get("sliceSize"), "sliceSize");
    opt.socket_buffer = static_cast<int>(get_u64(o.Get("socketBufferBytes"), "socketBufferBytes"));
    opt.window_bytes = get_u64(o.Get("windowBytes"), "windowBytes");
    opt.cancel_grace_ms = static_cast<int>(get_u64(o.Get("cancelGraceMs"), "cancelGraceMs"));
    Napi::Value secret = o.Get("authSecret");
    if (!secret.IsUndefined() && !secret.IsNull()) {
      auto bytes = te::napi::get_bytes(secret, "authSecret");
      opt.secret.assign(bytes.data, bytes.data + bytes.length);
    }

    bridge_ = te::napi::CompletionBridge<Event>::create(
        env, "te:mooncake-tcp", [this](Napi::Env env, std::vector<Event>& events) { deliver(env, events); });
    auto* bridge = bridge_;
    transport_ = std::make_shared<tetcp::Transport>(opt, [bridge](Event e) { bridge->push(std::move(e)); });
    std::string err;
    te::Status s = transport_->start(&err);
    if (s != te::TE_OK) {
      transport_.reset();
      bridge_->close(env);
      bridge_ = nullptr;
      closed_ = true;
      throw_status(env, s, err);
    }
    napi_add_env_cleanup_hook(env, &TcpTransport::cleanup_hook, this);
    hook_ = true;
  }

  ~TcpTransport() override { shutdown(nullptr); }

 private:
  static void cleanup_hook(void* arg) {
    auto* self = static_cast<TcpTransport*>(arg);
    self->hook_ = false;
    self->shutdown(nullptr);
  }

  // Stops threads first, then the bridge (no producer may outlive it).
  void shutdown(napi_env env) {
    if (closed_) return;
    closed_ = true;
    if (transport_) transport_->close();
    if (bridge_) bridge_->close(env);
    bridge_ = nullptr;
    if (hook_ && env) napi_remove_env_cleanup_hook(env, &TcpTransport::cleanup_hook, this);
    hook_ = false;
  }

  void check_open(Napi::Env env) {
    if (closed_) throw_status(env, te::TE_ABORTED, "transport is closed");
  }

  void deliver(Napi::Env env, std::vector<Event>& events) {
    for (Event& e : events) {
      Napi::HandleScope scope(env);
      switch (e.kind) {
        case Event::BATCH: {
          auto b = transport_ ? transport_->take_batch(e.id) : nullptr;
          if (!b) break;
          auto statuses = Napi::Int32Array::New(env, b->n);
          uint64_t bytes = 0;
          for (size_t i = 0; i < b->n; ++i) {
            int32_t st = b->statuses[i].load();
            statuses[i] = st;
            if (st == te::TE_OK) bytes += b->lengths[i];
          }
          int32_t bs = b->cancel_status.load();
          if (bs == 0) bs = b->batch_status.load();
          std::string msg;
          {
            std::lock_guard<std::mutex> lock(b->err_mu);
            msg = b->error;
          }
          if (bridge_) bridge_->unhold(env);
          on_batch_.Call({Napi::Number::New(env, static_cast<double>(e.id)), Napi::Number::New(env, bs), statuses,
                          Napi::BigInt::New(env, bytes), Napi::String::New(env, msg)});
          break;
        }
        case Event::OPEN:
          if (bridge_) bridge_->unhold(env);
          on_open_.Call({Napi::Number::New(env, static_cast<double>(e.id)), Napi::Number::New(env, e.status),
                         Napi::String::New(env, e.text)});
          break;
        case Event::NOTIFY: {
          auto payload = Napi::Buffer<uint8_t>::Copy(env, e.payload.data(), e.payload.size());
          on_notify_.Call({Napi::String::New(env, e.text), payload});
          break;
        }
      }
    }
  }

  Napi::Value Port(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), transport_ ? transport_->port() : 0);
  }

  // registerMemory(buffer | null, addr: bigint, length: bigint, remoteAccess: boolean, device?: number): bigint
  // device: -1 (or absent) host memory, N >= 0 raw device memory of cuda:N (validated here).
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[1], "addr");
    uint64_t length = get_u64(info[2], "length");
    bool remote = info[3].ToBoolean().Value();
    bool has_buffer = !info[0].IsNull() && !info[0].IsUndefined();
    int device = tetcp::kHost;
    if (info.Length() > 4 && info[4].IsNumber()) device = info[4].As<Napi::Number>().Int32Value();
    if (device != tetcp::kHost) {
      if (device < 0) throw_status(env, te::TE_INVALID_ARGUMENT, "device must be -1 (host) or a CUDA ordinal");
      if (has_buffer) throw_status(env, te::TE_INVALID_ARGUMENT, "a JS buffer is host memory; it cannot be registered as cuda:" + std::to_string(device));
      if (length == 0 || addr == 0 || te::range_overflows(addr, length))
        throw_status(env, te::TE_INVALID_ARGUMENT, "cannot register an empty, null or wrapping range");
      std::string why;
      te::Status s = tetcp::check_device_range(addr, length, device, &why);
      if (s != te::TE_OK) throw_status(env, s, why);
      s = transport_->registry().add(addr, length, remote);
      if (s == te::TE_MEMORY_OVERLAP) throw_status(env, s, "memory overlaps a registered region");
      if (s != te::TE_OK) throw_status(env, s, "cannot register an empty or wrapping range");
      transport_->devices().add(addr, length, device);
      return Napi::BigInt::New(env, addr);
    }
    if (has_buffer) {
      auto bytes = te::napi::get_bytes(info[0], "buffer");
      uint64_t base = reinterpret_cast<uint64_t>(bytes.data);
      if (addr == 0) addr = base;
      if (bytes.length == 0 || !te::range_within(base, bytes.length, addr, length))
        throw_status(env, te::TE_ADDRESS_OUT_OF_RANGE, "the range to register does not lie inside the given buffer");
    }
    te::Status s = transport_->registry().add(addr, length, remote);
    if (s == te::TE_MEMORY_OVERLAP) throw_status(env, s, "memory overlaps a registered region");
    if (s != te::TE_OK) throw_status(env, s, "cannot register an empty or wrapping range");
    if (has_buffer) refs_[addr] = Napi::Persistent(info[0]);
    return Napi::BigInt::New(env, addr);
  }

  // unregisterMemory(addr: bigint): Promise<void> (waits until no access to it is in flight)
  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[0], "addr");
    auto* w = new UnregisterWorker(env, transport_, addr, [this, addr] { refs_.erase(addr); });
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }

  // openPeer(host, port, epoch: bigint, name, local: boolean): number (peer id; onOpen reports)
  Napi::Value OpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    std::string host = info[0].As<Napi::String>().Utf8Value();
    uint16_t port = static_cast<uint16_t>(get_u64(info[1], "port"));
    uint64_t epoch = get_u64(info[2], "epoch");
    std::string name = info[3].As<Napi::String>().Utf8Value();
    bool local = info[4].ToBoolean().Value();
    bridge_->hold(env);
    uint64_t id = transport_->open_peer(host, port, epoch, name, local, 0);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value ClosePeer(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->close_peer(get_u64(info[0], "peer"));
    return info.Env().Undefined();
  }

  // submit(peer, opcodes: Uint8Array, local, remote, lengths: BigUint64Array, notify: Uint8Array | null): number
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto ops = te::napi::get_typed<uint8_t>(info[1], napi_uint8_array, "opcodes");
    auto local = te::napi::get_biguint64(info[2], "localAddrs");
    auto remote = te::napi::get_biguint64(info[3], "remoteAddrs");
    auto lengths = te::napi::get_biguint64(info[4], "lengths");
    if (local.length != ops.length || remote.length != ops.length || lengths.length != ops.length)
      throw_status(env, te::TE_INVALID_ARGUMENT, "batch arrays must all have the same length");
    const uint8_t* notify = nullptr;
    size_t notify_len = 0;
    static const uint8_t empty = 0;
    if (info.Length() > 5 && !info[5].IsNull() && !info[5].IsUndefined()) {
      auto n = te::napi::get_bytes(info[5], "notify");
      notify = n.length ? n.data : &empty;
      notify_len = n.length;
    }
    uint64_t id = 0;
    std::string err;
    te::Status s = transport_->submit(peer, ops.data, local.data, remote.data, lengths.data, ops.length, notify,
                                      notify_len, &id, &err);
    if (s != te::TE_OK) throw_status(env, s, err);
    bridge_->hold(env);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->cancel(get_u64(info[0], "batch"), info[1].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    shutdown(env);
    refs_.clear();
    return env.Undefined();
  }

  std::shared_ptr<tetcp::Transport> transport_;
  te::napi::CompletionBridge<Event>* bridge_ = nullptr;
  Napi::FunctionReference on_batch_, on_open_, on_notify_;
  std::unordered_map<uint64_t, Napi::Reference<Napi::Value>> refs_;
  bool closed_ = false;
  bool hook_ = false;
};

Napi::Value SetErrorFactory(const Napi::CallbackInfo& info) {
  te::napi::addon_data(info.Env()).error_factory = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

Napi::Value StatusName(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), te::status_name(info[0].As<Napi::Number>().Int32Value()));
}

Napi::Value ProcessEpoch(const Napi::CallbackInfo& info) { return Napi::BigInt::New(info.Env(), te::process_epoch()); }

// probeCuda(): {builtWithCuda, toolkitVersion, runtimeVersion, driverVersion, devices: [{ordinal, name, pciBusId}], reason}
Napi::Value ProbeCuda(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  te::cuda::ProbeInfo p = te::cuda::probe();
  Napi::Object o = Napi::Object::New(env);
  o.Set("builtWithCuda", tetcp::built_with_cuda());
  o.Set("toolkitVersion", p.toolkit_version);
  o.Set("runtimeVersion", p.runtime_version);
  o.Set("driverVersion", p.driver_version);
  o.Set("reason", p.no_device_reason);
  Napi::Array devs = Napi::Array::New(env, p.devices.size());
  for (size_t i = 0; i < p.devices.size(); ++i) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("ordinal", p.devices[i].ordinal);
    d.Set("name", p.devices[i].name);
    d.Set("pciBusId", p.devices[i].pci_bus_id);
    devs.Set(static_cast<uint32_t>(i), d);
  }
  o.Set("devices", devs);
  return o;
}

// Plain device memory for tests and tools (te_cuda's memory_tools; synchronous).
void check_cuda(Napi::Env env, const te::cuda::Error& e) {
  if (!e.ok()) throw_status(env, e.status, e.message);
}
int device_arg(const Napi::Value& v) { return static_cast<int>(get_u64(v, "device")); }
Napi::Value DeviceAlloc(const Napi::CallbackInfo& info) {
  uint64_t out = 0;
  check_cuda(info.Env(), te::cuda::device_alloc(device_arg(info[0]), get_u64(info[1], "bytes"), &out));
  return Napi::BigInt::New(info.Env(), out);
}
Napi::Value DeviceFree(const Napi::CallbackInfo& info) {
  check_cuda(info.Env(), te::cuda::device_free(device_arg(info[0]), get_u64(info[1], "addr")));
  return info.Env().Undefined();
}
Napi::Value CopyToDevice(const Napi::CallbackInfo& info) {
  auto src = te::napi::get_bytes(info[2], "source");
  check_cuda(info.Env(), te::cuda::copy_to_device(device_arg(info[0]), get_u64(info[1], "dst"), src.data, src.length));
  return info.Env().Undefined();
}
Napi::Value CopyToHost(const Napi::CallbackInfo& info) {
  auto dst = te::napi::get_bytes(info[1], "destination");
  check_cuda(info.Env(), te::cuda::copy_to_host(device_arg(info[0]), dst.data, get_u64(info[2], "src"), dst.length));
  return info.Env().Undefined();
}
Napi::Value Memset(const Napi::CallbackInfo& info) {
  check_cuda(info.Env(), te::cuda::device_memset(device_arg(info[0]), get_u64(info[1], "dst"),
                                                 static_cast<int>(get_u64(info[2], "value")), get_u64(info[3], "bytes")));
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("TcpTransport", TcpTransport::Init(env));
  exports.Set("setErrorFactory", Napi::Function::New(env, SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, StatusName));
  exports.Set("processEpoch", Napi::Function::New(env, ProcessEpoch));
  exports.Set("protocolVersion", Napi::Number::New(env, tetcp::kVersion));
  exports.Set("builtWithCuda", Napi::Boolean::New(env, tetcp::built_with_cuda()));
  exports.Set("probeCuda", Napi::Function::New(env, ProbeCuda));
  Napi::Object mem = Napi::Object::New(env);
  mem.Set("alloc", Napi::Function::New(env, DeviceAlloc));
  mem.Set("free", Napi::Function::New(env, DeviceFree));
  mem.Set("copyToDevice", Napi::Function::New(env, CopyToDevice));
  mem.Set("copyToHost", Napi::Function::New(env, CopyToHost));
  mem.Set("memset", Napi::Function::New(env, Memset));
  exports.Set("deviceMemory", mem);
  return exports;
}

}  // namespace

NODE_API_MODULE(te_mooncake_tcp, Init)
