// N-API surface of mooncake-tcp (declared for TypeScript in src/binding.ts). Arguments are
// validated in TypeScript; this layer converts them, runs the transport and carries its
// events back through a thread-safe function.
#include <napi.h>

#include <memory>
#include <unordered_map>

#include "cuda_staging.h"
#include "te/cuda/device.h"
#include "te/cuda/memory_tools.h"
#include "te/napi/transport_wrap.h"
#include "transport.h"

namespace {

using te::napi::get_u64;
using te::napi::throw_status;
using te::napi::u64_field;
using tetcp::Event;

class TcpTransport : public te::napi::TransportWrap<TcpTransport, tetcp::Transport, Event> {
  using Base = te::napi::TransportWrap<TcpTransport, tetcp::Transport, Event>;
  friend Base;

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

  explicit TcpTransport(const Napi::CallbackInfo& info) : Base(info, "new TcpTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object o = info[0].As<Napi::Object>();
    Napi::Object cb = info[1].As<Napi::Object>();
    on_batch_ = te::napi::callback_field(cb, "onBatch");
    on_open_ = te::napi::callback_field(cb, "onOpen");
    on_notify_ = te::napi::callback_field(cb, "onNotify");
    on_log_ = te::napi::callback_field(cb, "onLog");

    tetcp::Options opt;
    opt.segment_name = te::napi::string_field(o, "segmentName");
    opt.epoch = u64_field(o, "epoch");
    opt.bind_address = te::napi::string_field(o, "bindAddress");
    opt.port = static_cast<uint16_t>(u64_field(o, "port"));
    opt.io_threads = static_cast<int>(u64_field(o, "ioThreads"));
    opt.lanes = static_cast<int>(u64_field(o, "lanesPerPeer"));
    opt.connect_timeout_ms = static_cast<int>(u64_field(o, "connectTimeoutMs"));
    opt.slice_size = u64_field(o, "sliceSize");
    opt.socket_buffer = static_cast<int>(u64_field(o, "socketBufferBytes"));
    opt.window_bytes = u64_field(o, "windowBytes");
    opt.cancel_grace_ms = static_cast<int>(u64_field(o, "cancelGraceMs"));
    opt.notify_queue_per_peer = u64_field(o, "notifyQueuePerPeer");
    opt.notify_queue_bytes = u64_field(o, "notifyQueueBytes");
    opt.max_connections = u64_field(o, "maxConnections");
    opt.max_connections_per_address = u64_field(o, "maxConnectionsPerAddress");
    opt.handshake_timeout_ms = static_cast<int64_t>(u64_field(o, "handshakeTimeoutMs"));
    opt.idle_timeout_ms = static_cast<int64_t>(u64_field(o, "idleTimeoutMs"));
    opt.busy_poll_us = static_cast<int64_t>(u64_field(o, "busyPollUs"));
    Napi::Value secret = o.Get("authSecret");
    if (te::napi::is_given(secret)) {
      auto bytes = te::napi::get_bytes(secret, "authSecret");
      opt.secret.assign(bytes.data, bytes.data + bytes.length);
    }

    auto* bridge = create_bridge(env, "te:mooncake-tcp");
    transport_ = std::make_shared<tetcp::Transport>(opt, [bridge](Event e) { bridge->push(std::move(e)); });
    start(env);
  }

 private:
  void deliver(Napi::Env env, Event& e) {
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
        unhold(env);
        te::napi::call_on_batch(env, on_batch_, e.id, bs, statuses, bytes, msg, b->remote_unconfirmed.load(std::memory_order_acquire));
        break;
      }
      case Event::OPEN:
        unhold(env);
        te::napi::call_on_status(env, on_open_, e.id, e.status, e.text);
        break;
      case Event::NOTIFY:
        // Out of the bounded queue before the listeners run (a throwing listener must not leak it).
        if (transport_) transport_->notification_taken(e.text, e.payload.size());
        te::napi::call_on_notify(env, on_notify_, e.text, e.payload);
        break;
      case Event::LOG:
        on_log_.Call({Napi::String::New(env, "warn"), Napi::String::New(env, e.text)});
        break;
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
    bool has_buffer = te::napi::is_given(info[0]);
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
      // Listed as device memory before the registry publishes it: a request arriving in
      // between passes the registry's check and must not be copied as host memory (memcpy
      // into device memory). Delisted again when the registry refuses it.
      uint64_t token = transport_->devices().add(addr, length, device);
      s = transport_->registry().add(addr, length, remote);
      if (s != te::TE_OK) transport_->devices().remove(addr, token);
      if (s == te::TE_MEMORY_OVERLAP) throw_status(env, s, "memory overlaps a registered region");
      if (s != te::TE_OK) throw_status(env, s, "cannot register an empty or wrapping range");
      device_tokens_[addr] = token;
      return Napi::BigInt::New(env, addr);
    }
    if (has_buffer) te::napi::check_buffer_range(info[0], addr, length);
    te::Status s = transport_->registry().add(addr, length, remote);
    if (s == te::TE_MEMORY_OVERLAP) throw_status(env, s, "memory overlaps a registered region");
    if (s != te::TE_OK) throw_status(env, s, "cannot register an empty or wrapping range");
    if (has_buffer) keep_buffer(addr, info[0]);
    return Napi::BigInt::New(env, addr);
  }

  // unregisterMemory(addr: bigint): Promise<void> (waits until no access to it is in flight)
  // The registry forgets the region first (and waits out its last access); only then is its
  // device entry delisted, by the token of this registration: registering the same address
  // again while this runs lists a new entry, which stays.
  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    uint64_t token = 0;
    if (!closed_ && info.Length() > 0 && info[0].IsBigInt()) {
      bool lossless = false;
      auto it = device_tokens_.find(info[0].As<Napi::BigInt>().Uint64Value(&lossless));
      if (lossless && it != device_tokens_.end()) {
        token = it->second;
        device_tokens_.erase(it);
      }
    }
    return unregister_memory(info, "te:mooncake-tcp:unregister", [token](tetcp::Transport& t, uint64_t addr, std::string* err) {
      te::Status s = t.registry().remove(addr);
      if (s == te::TE_OK && token != 0) t.devices().remove(addr, token);
      else if (s != te::TE_OK) *err = "no registered memory starts at 0x" + hex(addr);
      return s;
    });
  }
  static std::string hex(uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
    return b;
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

  // submit(peer, opcodes: Uint8Array, local, remote, lengths: BigUint64Array, notify: Uint8Array | null): number
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto batch = te::napi::get_batch(info, 1);
    auto notify = te::napi::get_notify(info, 5);
    uint64_t id = 0;
    std::string err;
    te::Status s = transport_->submit(peer, batch.ops.data, batch.local.data, batch.remote.data, batch.lengths.data,
                                      batch.ops.length, notify.data, notify.length, &id, &err);
    if (s != te::TE_OK) throw_status(env, s, err);
    bridge_->hold(env);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::FunctionReference on_batch_, on_open_, on_notify_, on_log_;
  // JS thread only: the DeviceMap token of each registered device region, by address.
  std::unordered_map<uint64_t, uint64_t> device_tokens_;
};

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
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  exports.Set("processEpoch", Napi::Function::New(env, te::napi::ProcessEpoch));
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
