// The Node-API surface shared by the libfabric plugins (declared for TypeScript in each
// plugin's src/binding.ts). Header-only: only addons include it. Arguments are validated
// in TypeScript; this layer converts them, runs te::fabric::Transport and carries its
// events back through a CompletionBridge (native threads never touch JS).
#pragma once

#include <napi.h>

#include <memory>
#include <string>

#include "te/fabric/pool.h"
#include "te/fabric/protocol.h"
#include "te/fabric/transport.h"
#include "te/napi/transport_wrap.h"

namespace te::fabric::napi {

using te::napi::get_u64;
using te::napi::throw_status;

inline Options options_from(const Napi::Object& o) {
  using te::napi::bool_field_or;
  using te::napi::string_field_or_empty;
  using te::napi::u64_field_or;
  Options opt;
  opt.segment_name = string_field_or_empty(o, "segmentName");
  opt.epoch = u64_field_or(o, "epoch", 0);
  opt.provider = string_field_or_empty(o, "provider");
  opt.source_address = string_field_or_empty(o, "sourceAddress");
  opt.plugin = string_field_or_empty(o, "plugin");
  Napi::Value nics = o.Get("nics");
  if (nics.IsArray()) {
    Napi::Array a = nics.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) opt.nics.push_back(a.Get(i).As<Napi::String>().Utf8Value());
  }
  opt.allow_shm = bool_field_or(o, "allowShm", false);
  opt.max_rails = static_cast<int>(u64_field_or(o, "maxRails", 4));
  opt.rails_per_nic = static_cast<int>(u64_field_or(o, "railsPerNic", 0));
  opt.cpus = static_cast<int>(u64_field_or(o, "cpus", 0));
  opt.slice_size = u64_field_or(o, "sliceSize", 1 << 20);
  opt.window = static_cast<int>(u64_field_or(o, "window", 64));
  opt.connect_timeout_ms = static_cast<int>(u64_field_or(o, "connectTimeoutMs", 3000));
  opt.cancel_grace_ms = static_cast<int>(u64_field_or(o, "cancelGraceMs", 250));
  opt.delivery_complete = bool_field_or(o, "deliveryComplete", true);
  opt.write_fence = bool_field_or(o, "writeFence", true);
  opt.max_op_parts = static_cast<int>(u64_field_or(o, "slicesPerOp", 4));
  opt.pool_size = u64_field_or(o, "poolSize", 0);
  opt.pool_strict = bool_field_or(o, "poolStrict", false);
  opt.notify_queue_per_peer = u64_field_or(o, "notifyQueuePerPeer", 1024);
  opt.notify_queue_bytes = u64_field_or(o, "notifyQueueBytes", 64ull << 20);
  return opt;
}

class FabricTransport : public te::napi::TransportWrap<FabricTransport, Transport, Event> {
  using Base = te::napi::TransportWrap<FabricTransport, Transport, Event>;
  friend Base;

 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "FabricTransport",
                       {InstanceMethod("rails", &FabricTransport::Rails),
                        InstanceMethod("registerMemory", &FabricTransport::RegisterMemory),
                        InstanceMethod("unregisterMemory", &FabricTransport::UnregisterMemory),
                        InstanceMethod("openPeer", &FabricTransport::OpenPeer),
                        InstanceMethod("closePeer", &FabricTransport::ClosePeer),
                        InstanceMethod("checkPeer", &FabricTransport::CheckPeer),
                        InstanceMethod("submit", &FabricTransport::Submit),
                        InstanceMethod("cancel", &FabricTransport::Cancel),
                        InstanceMethod("poolAlloc", &FabricTransport::PoolAlloc),
                        InstanceMethod("poolFree", &FabricTransport::PoolFree),
                        InstanceMethod("poolStats", &FabricTransport::PoolStats),
                        InstanceMethod("close", &FabricTransport::Close)});
  }

  explicit FabricTransport(const Napi::CallbackInfo& info) : Base(info, "new FabricTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object cb = info[1].As<Napi::Object>();
    on_batch_ = te::napi::callback_field(cb, "onBatch");
    on_open_ = te::napi::callback_field(cb, "onOpen");
    on_notify_ = te::napi::callback_field(cb, "onNotify");
    on_check_ = te::napi::callback_field(cb, "onCheck");
    Options opt = options_from(info[0].As<Napi::Object>());
    auto* bridge = create_bridge(env, "te:fabric");
    transport_ = std::make_shared<Transport>(opt, [bridge](Event e) { bridge->push(std::move(e)); });
    start(env);
  }

 private:
  void deliver(Napi::Env env, Event& e) {
    switch (e.kind) {
      case Event::BATCH: {
        auto b = transport_ ? transport_->take_batch(e.id) : nullptr;
        if (!b) break;
        auto statuses = te::napi::int32_array(env, b->statuses);
        unhold(env);
        te::napi::call_on_batch(env, on_batch_, e.id, b->status, statuses, b->bytes, b->message, b->remote_may_be_written);
        break;
      }
      case Event::OPEN:
        unhold(env);
        te::napi::call_on_status(env, on_open_, e.id, e.status, e.text);
        break;
      case Event::CHECK:
        unhold(env);
        te::napi::call_on_status(env, on_check_, e.id, e.status, e.text);
        break;
      case Event::NOTIFY:
        if (transport_) transport_->notification_taken(e.text, e.payload.size());
        te::napi::call_on_notify(env, on_notify_, e.text, e.payload);
        break;
    }
  }

  Napi::Value Rails(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Array out = Napi::Array::New(env);
    if (!transport_) return out;
    uint32_t i = 0;
    for (const RailInfo& r : transport_->rails()) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("provider", r.provider);
      o.Set("fabric", r.fabric);
      o.Set("domain", r.domain);
      o.Set("addr", Napi::Buffer<uint8_t>::Copy(env, r.addr.data(), r.addr.size()));
      o.Set("virtAddr", r.virt_addr);
      o.Set("mrMode", Napi::Number::New(env, static_cast<double>(r.mr_mode)));
      o.Set("keySize", Napi::Number::New(env, static_cast<double>(r.key_size)));
      o.Set("slicesPerOp", Napi::Number::New(env, r.slices_per_op));
      o.Set("rmaOps", Napi::Number::New(env, static_cast<double>(r.rma_ops)));
      o.Set("rmaSlices", Napi::Number::New(env, static_cast<double>(r.rma_slices)));
      o.Set("rmaDeliveryCompleteOps", Napi::Number::New(env, static_cast<double>(r.rma_delivery_complete_ops)));
      o.Set("deliveryComplete", r.delivery_complete);
      out.Set(i++, o);
    }
    return out;
  }

  // registerMemory(buffer | null, addr, length, remote) -> Promise<{addr, keys: bigint[], base}>.
  // fi_mr_reg pins and maps pages (milliseconds to seconds for large regions with verbs):
  // it runs on a worker thread, with the buffer kept alive from the call on.
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[1], "addr");
    uint64_t length = get_u64(info[2], "length");
    bool remote = info[3].ToBoolean().Value();
    bool has_buffer = te::napi::is_given(info[0]);
    if (has_buffer) {
      te::napi::check_buffer_range(info[0], addr, length);
      keep_buffer(addr, info[0]);
    }
    auto* w = new RegisterWorker(env, transport_, addr, length, remote, [this, addr, has_buffer](bool ok) {
      if (!ok && has_buffer) forget_buffer(addr);
    });
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }

  class RegisterWorker : public Napi::AsyncWorker {
   public:
    RegisterWorker(Napi::Env env, std::shared_ptr<Transport> t, uint64_t addr, uint64_t length, bool remote,
                   std::function<void(bool)> done)
        : Napi::AsyncWorker(env, "te:fabric:register"),
          deferred_(Napi::Promise::Deferred::New(env)),
          t_(std::move(t)),
          addr_(addr),
          length_(length),
          remote_(remote),
          done_(std::move(done)) {}
    Napi::Promise promise() { return deferred_.Promise(); }
    void Execute() override { status_ = t_->register_memory(addr_, length_, remote_, &keys_, &base_, &err_); }
    void OnOK() override {
      Napi::Env env = Env();
      done_(status_ == TE_OK);
      if (status_ != TE_OK) {
        deferred_.Reject(te::napi::make_error(env, status_, err_));
        return;
      }
      Napi::Object out = Napi::Object::New(env);
      out.Set("addr", Napi::BigInt::New(env, addr_));
      out.Set("base", Napi::BigInt::New(env, base_));
      Napi::Array k = Napi::Array::New(env, keys_.size());
      for (uint32_t i = 0; i < keys_.size(); ++i) k.Set(i, Napi::BigInt::New(env, keys_[i]));
      out.Set("keys", k);
      deferred_.Resolve(out);
    }

   private:
    Napi::Promise::Deferred deferred_;
    std::shared_ptr<Transport> t_;  // outlives the job even if the transport is closed meanwhile
    uint64_t addr_, length_;
    bool remote_;
    std::function<void(bool)> done_;
    std::vector<uint64_t> keys_;
    uint64_t base_ = 0;
    int32_t status_ = TE_OK;
    std::string err_;
  };

  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    return unregister_memory(info, "te:fabric:unregister",
                             [](Transport& t, uint64_t addr, std::string* err) { return t.unregister_memory(addr, err); });
  }

  // openPeer(name, epoch, provider, rails: Uint8Array[], virtAddr: boolean[], sameProcess, regions[]) -> id
  Napi::Value OpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    std::string name = info[0].As<Napi::String>().Utf8Value();
    uint64_t epoch = get_u64(info[1], "epoch");
    PeerAddress a;
    a.provider = info[2].As<Napi::String>().Utf8Value();
    Napi::Array rails = info[3].As<Napi::Array>();
    Napi::Array virt = info[4].As<Napi::Array>();
    for (uint32_t i = 0; i < rails.Length(); ++i) {
      auto b = te::napi::get_bytes(rails.Get(i), "rail address");
      a.rails.emplace_back(b.data, b.data + b.length);
      a.virt_addr.push_back(virt.Get(i).ToBoolean().Value());
    }
    bool same = info[5].ToBoolean().Value();
    std::vector<RemoteRegion> regions;
    Napi::Array rs = info[6].As<Napi::Array>();
    for (uint32_t i = 0; i < rs.Length(); ++i) {
      Napi::Object o = rs.Get(i).As<Napi::Object>();
      RemoteRegion r;
      r.addr = te::napi::u64_field(o, "addr");
      r.length = te::napi::u64_field(o, "length");
      r.base = te::napi::u64_field(o, "base");
      Napi::Array k = o.Get("keys").As<Napi::Array>();
      for (uint32_t j = 0; j < k.Length(); ++j) r.keys.push_back(get_u64(k.Get(j), "key"));
      regions.push_back(std::move(r));
    }
    bridge_->hold(env);
    uint64_t id = transport_->open_peer(name, epoch, a, same, regions);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value CheckPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t id = 0;
    std::string err;
    Status s = transport_->check_peer(get_u64(info[0], "peer"), static_cast<int>(get_u64(info[1], "timeoutMs")), &id, &err);
    if (s != TE_OK) throw_status(env, s, err);
    bridge_->hold(env);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto batch = te::napi::get_batch(info, 1);
    auto notify = te::napi::get_notify(info, 5);
    bridge_->hold(env);
    uint64_t id = 0;
    std::string err;
    Status s = transport_->submit(peer, batch.ops.data, batch.local.data, batch.remote.data, batch.lengths.data,
                                  batch.ops.length, notify.data, notify.length, &id, &err);
    if (s != TE_OK) {
      bridge_->unhold(env);
      throw_status(env, s, err);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value PoolAlloc(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = 0;
    std::string err;
    Status s = transport_->pool_alloc(get_u64(info[0], "bytes"), &addr, &err);
    if (s != TE_OK) throw_status(env, s, err);
    return Napi::BigInt::New(env, addr);
  }

  Napi::Value PoolFree(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    std::string err;
    Status s = transport_->pool_free(get_u64(info[0], "addr"), &err);
    if (s != TE_OK) throw_status(env, s, err);
    return env.Undefined();
  }

  Napi::Value PoolStats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t base = 0, size = 0, used = 0, n = 0;
    if (transport_) transport_->pool_stats(&base, &size, &used, &n);
    Napi::Object o = Napi::Object::New(env);
    o.Set("base", Napi::BigInt::New(env, base));
    o.Set("size", Napi::BigInt::New(env, size));
    o.Set("used", Napi::BigInt::New(env, used));
    o.Set("allocations", Napi::Number::New(env, static_cast<double>(n)));
    return o;
  }

  Napi::FunctionReference on_batch_, on_open_, on_notify_, on_check_;
};

inline Napi::Value Discover(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Options opt = info.Length() > 0 && info[0].IsObject() ? options_from(info[0].As<Napi::Object>()) : Options{};
  Discovery d = discover(opt);
  Napi::Object o = Napi::Object::New(env);
  o.Set("builtWithLibfabric", d.built_with_libfabric);
  o.Set("version", d.version);
  Napi::Array provs = Napi::Array::New(env, d.providers.size());
  for (uint32_t i = 0; i < d.providers.size(); ++i) provs.Set(i, d.providers[i]);
  o.Set("providers", provs);
  Napi::Array rma = Napi::Array::New(env, d.rma.size());
  for (uint32_t i = 0; i < d.rma.size(); ++i) {
    Napi::Object c = Napi::Object::New(env);
    c.Set("provider", d.rma[i].provider);
    c.Set("fabric", d.rma[i].fabric);
    c.Set("domain", d.rma[i].domain);
    c.Set("mrMode", Napi::Number::New(env, static_cast<double>(d.rma[i].mr_mode)));
    c.Set("hardware", d.rma[i].hardware);
    rma.Set(i, c);
  }
  o.Set("rma", rma);
  o.Set("chosen", d.chosen);
  o.Set("message", d.message);
  return o;
}

/**
 * The process pool as one ArrayBuffer (created once: V8 refuses two external buffers over
 * the same memory). Views of it are what `allocate()` hands out.
 */
inline Napi::Value PoolBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Pool* p = Pool::existing();
  if (!p) return env.Null();
  static Napi::Reference<Napi::ArrayBuffer>* cached = nullptr;  // the pool lives as long as the process
  if (!cached) {
    auto ab = Napi::ArrayBuffer::New(env, reinterpret_cast<void*>(p->base()), p->size());
    cached = new Napi::Reference<Napi::ArrayBuffer>(Napi::Persistent(ab));
    cached->SuppressDestruct();
  }
  return cached->Value();
}

inline Napi::Object init(Napi::Env env, Napi::Object exports) {
  exports.Set("FabricTransport", FabricTransport::Init(env));
  exports.Set("discover", Napi::Function::New(env, Discover));
  exports.Set("poolBuffer", Napi::Function::New(env, PoolBuffer));
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  exports.Set("processEpoch", Napi::Function::New(env, te::napi::ProcessEpoch));
  exports.Set("builtWithLibfabric", Napi::Boolean::New(env, TE_HAVE_LIBFABRIC != 0));
  exports.Set("protocolVersion", Napi::Number::New(env, te::fabric::kProtocolVersion));
  return exports;
}

}  // namespace te::fabric::napi
