// The Node-API surface shared by the libfabric plugins (declared for TypeScript in each
// plugin's src/binding.ts). Header-only: only addons include it. Arguments are validated
// in TypeScript; this layer converts them, runs te::fabric::Transport and carries its
// events back through a CompletionBridge (native threads never touch JS).
#pragma once

#include <napi.h>

#include <memory>
#include <string>

#include "te/fabric/protocol.h"
#include "te/fabric/transport.h"
#include "te/napi/native_transport.h"

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
  opt.idle_spin_us = static_cast<int64_t>(u64_field_or(o, "idleSpinUs", 20000));
  opt.env_prefix = string_field_or_empty(o, "envPrefix");
  opt.notify_queue_per_peer = u64_field_or(o, "notifyQueuePerPeer", 1024);
  opt.notify_queue_bytes = u64_field_or(o, "notifyQueueBytes", 64ull << 20);
  return opt;
}

/**
 * A plugin's part of the options, run before its transport starts (barex: its pool becomes
 * the transport's arena). It may throw_status.
 */
using OptionsHook = void (*)(Napi::Env env, const Napi::Object& options, Options& opt);
inline OptionsHook& options_hook() {
  static OptionsHook hook = nullptr;  // one addon per plugin: set once by init()
  return hook;
}

class FabricTransport : public te::napi::NativeTransportWrap<FabricTransport, Transport> {
  using Base = te::napi::NativeTransportWrap<FabricTransport, Transport>;
  friend Base;

 public:
  static Napi::Function Init(Napi::Env env) {
    return define_class(
        env, "FabricTransport",
        {InstanceMethod("rails", &FabricTransport::Rails), InstanceMethod("checkPeer", &FabricTransport::CheckPeer),
         InstanceMethod("isRegistered", &FabricTransport::IsRegistered)});
  }

  explicit FabricTransport(const Napi::CallbackInfo& info) : Base(info, "new FabricTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Options opt = options_from(info[0].As<Napi::Object>());
    if (options_hook()) options_hook()(env, info[0].As<Napi::Object>(), opt);
    transport_ = std::make_shared<Transport>(opt, event_sink(env, "te:fabric"));
    start(env);
  }

 private:
  void deliver_batch(Napi::Env env, uint64_t id) {
    auto b = transport_ ? transport_->take_batch(id) : nullptr;
    if (!b) return;
    batch_done(env, id, b->status, te::napi::int32_array(env, b->statuses), b->bytes, b->message,
               b->remote_may_be_written);
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
      o.Set("waits", Napi::Number::New(env, static_cast<double>(r.waits)));
      o.Set("waitsWithData", Napi::Number::New(env, static_cast<double>(r.waits_with_data)));
      out.Set(i++, o);
    }
    return out;
  }

  // registerMemory(buffer | null, addr, length, remote) -> Promise<{addr, keys: bigint[], base}>.
  // fi_mr_reg pins and maps pages (milliseconds to seconds for large regions with verbs):
  // it runs on a worker thread, with the buffer kept alive from the call on.
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const RegisterArgs a = register_args(info);
    uint64_t addr = a.addr;
    const uint64_t length = a.length;
    const bool remote = a.remote, has_buffer = a.has_buffer;
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
    return unregister_memory(info, "te:fabric:unregister", [](Transport& t, uint64_t addr, std::string* err) {
      return t.unregister_memory(addr, err);
    });
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
    Status s =
        transport_->check_peer(get_u64(info[0], "peer"), static_cast<int>(get_u64(info[1], "timeoutMs")), &id, &err);
    if (s != TE_OK) throw_status(env, s, err);
    bridge_->hold(env);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value IsRegistered(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(),
                              transport_ && !closed_ && transport_->is_registered(get_u64(info[0], "addr")));
  }
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

/** The exports every libfabric plugin shares; `hook` adds the plugin's part of the options. */
inline Napi::Object init(Napi::Env env, Napi::Object exports, OptionsHook hook = nullptr) {
  options_hook() = hook;
  exports.Set("FabricTransport", FabricTransport::Init(env));
  exports.Set("discover", Napi::Function::New(env, Discover));
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  exports.Set("processEpoch", Napi::Function::New(env, te::napi::ProcessEpoch));
  exports.Set("builtWithLibfabric", Napi::Boolean::New(env, TE_HAVE_LIBFABRIC != 0));
  exports.Set("protocolVersion", Napi::Number::New(env, te::fabric::kProtocolVersion));
  return exports;
}

}  // namespace te::fabric::napi
