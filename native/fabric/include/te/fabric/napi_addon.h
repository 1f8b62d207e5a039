// The Node-API surface shared by the libfabric plugins (declared for TypeScript in each
// plugin's src/binding.ts). Header-only: only addons include it. Arguments are validated
// in TypeScript; this layer converts them, runs te::fabric::Transport and carries its
// events back through a CompletionBridge (native threads never touch JS).
#pragma once

#include <napi.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "te/epoch.h"
#include "te/fabric/pool.h"
#include "te/memory_registry.h"
#include "te/fabric/transport.h"
#include "te/napi/completion_bridge.h"
#include "te/napi/values.h"

namespace te::fabric::napi {

using te::napi::get_u64;
using te::napi::throw_status;

inline Options options_from(const Napi::Object& o) {
  Options opt;
  auto str = [&](const char* k) {
    Napi::Value v = o.Get(k);
    return v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
  };
  auto num = [&](const char* k, uint64_t d) {
    Napi::Value v = o.Get(k);
    return v.IsUndefined() || v.IsNull() ? d : get_u64(v, k);
  };
  auto flag = [&](const char* k, bool d) {
    Napi::Value v = o.Get(k);
    return v.IsBoolean() ? v.As<Napi::Boolean>().Value() : d;
  };
  opt.segment_name = str("segmentName");
  opt.epoch = num("epoch", 0);
  opt.provider = str("provider");
  opt.source_address = str("sourceAddress");
  opt.plugin = str("plugin");
  Napi::Value nics = o.Get("nics");
  if (nics.IsArray()) {
    Napi::Array a = nics.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) opt.nics.push_back(a.Get(i).As<Napi::String>().Utf8Value());
  }
  opt.allow_shm = flag("allowShm", false);
  opt.max_rails = static_cast<int>(num("maxRails", 4));
  opt.slice_size = num("sliceSize", 1 << 20);
  opt.window = static_cast<int>(num("window", 64));
  opt.connect_timeout_ms = static_cast<int>(num("connectTimeoutMs", 3000));
  opt.cancel_grace_ms = static_cast<int>(num("cancelGraceMs", 250));
  opt.delivery_complete = flag("deliveryComplete", true);
  opt.pool_size = num("poolSize", 0);
  opt.pool_strict = flag("poolStrict", false);
  return opt;
}

class UnregisterWorker : public Napi::AsyncWorker {
 public:
  UnregisterWorker(Napi::Env env, std::shared_ptr<Transport> t, uint64_t addr, std::function<void()> done)
      : Napi::AsyncWorker(env, "te:fabric:unregister"), deferred_(Napi::Promise::Deferred::New(env)), t_(std::move(t)), addr_(addr), done_(std::move(done)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override { status_ = t_->unregister_memory(addr_, &err_); }
  void OnOK() override {
    if (status_ == TE_OK) {
      done_();
      deferred_.Resolve(Env().Undefined());
    } else {
      deferred_.Reject(te::napi::make_error(Env(), status_, err_));
    }
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Transport> t_;
  uint64_t addr_;
  std::function<void()> done_;
  int32_t status_ = 0;
  std::string err_;
};

class FabricTransport : public Napi::ObjectWrap<FabricTransport> {
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

  explicit FabricTransport(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FabricTransport>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsObject())
      throw_status(env, TE_INVALID_ARGUMENT, "new FabricTransport(options, callbacks)");
    Napi::Object cb = info[1].As<Napi::Object>();
    on_batch_ = Napi::Persistent(cb.Get("onBatch").As<Napi::Function>());
    on_open_ = Napi::Persistent(cb.Get("onOpen").As<Napi::Function>());
    on_notify_ = Napi::Persistent(cb.Get("onNotify").As<Napi::Function>());
    on_check_ = Napi::Persistent(cb.Get("onCheck").As<Napi::Function>());
    Options opt = options_from(info[0].As<Napi::Object>());
    bridge_ = te::napi::CompletionBridge<Event>::create(env, "te:fabric", [this](Napi::Env e, std::vector<Event>& ev) { deliver(e, ev); });
    auto* bridge = bridge_;
    transport_ = std::make_shared<Transport>(opt, [bridge](Event e) { bridge->push(std::move(e)); });
    std::string err;
    Status s = transport_->start(&err);
    if (s != TE_OK) {
      transport_.reset();
      bridge_->close(env);
      bridge_ = nullptr;
      closed_ = true;
      throw_status(env, s, err);
    }
    napi_add_env_cleanup_hook(env, &FabricTransport::cleanup_hook, this);
    hook_ = true;
  }

  ~FabricTransport() override { shutdown(nullptr); }

 private:
  static void cleanup_hook(void* arg) {
    auto* self = static_cast<FabricTransport*>(arg);
    self->hook_ = false;
    self->shutdown(nullptr);
  }

  void shutdown(napi_env env) {
    if (closed_) return;
    closed_ = true;
    if (transport_) transport_->close();
    if (bridge_) bridge_->close(env);
    bridge_ = nullptr;
    if (hook_ && env) napi_remove_env_cleanup_hook(env, &FabricTransport::cleanup_hook, this);
    hook_ = false;
  }

  void check_open(Napi::Env env) {
    if (closed_) throw_status(env, TE_ABORTED, "transport is closed");
  }

  void deliver(Napi::Env env, std::vector<Event>& events) {
    for (Event& e : events) {
      Napi::HandleScope scope(env);
      switch (e.kind) {
        case Event::BATCH: {
          auto b = transport_ ? transport_->take_batch(e.id) : nullptr;
          if (!b) break;
          auto statuses = Napi::Int32Array::New(env, b->statuses.size());
          for (size_t i = 0; i < b->statuses.size(); ++i) statuses[i] = b->statuses[i];
          if (bridge_) bridge_->unhold(env);
          on_batch_.Call({Napi::Number::New(env, static_cast<double>(e.id)), Napi::Number::New(env, b->status), statuses,
                          Napi::BigInt::New(env, b->bytes), Napi::String::New(env, b->message)});
          break;
        }
        case Event::OPEN:
          if (bridge_) bridge_->unhold(env);
          on_open_.Call({Napi::Number::New(env, static_cast<double>(e.id)), Napi::Number::New(env, e.status), Napi::String::New(env, e.text)});
          break;
        case Event::CHECK:
          if (bridge_) bridge_->unhold(env);
          on_check_.Call({Napi::Number::New(env, static_cast<double>(e.id)), Napi::Number::New(env, e.status), Napi::String::New(env, e.text)});
          break;
        case Event::NOTIFY: {
          auto payload = Napi::Buffer<uint8_t>::Copy(env, e.payload.data(), e.payload.size());
          on_notify_.Call({Napi::String::New(env, e.text), payload});
          break;
        }
      }
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
      out.Set(i++, o);
    }
    return out;
  }

  // registerMemory(buffer | null, addr, length, remote) -> {addr, keys: bigint[], base}
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[1], "addr");
    uint64_t length = get_u64(info[2], "length");
    bool remote = info[3].ToBoolean().Value();
    bool has_buffer = !info[0].IsNull() && !info[0].IsUndefined();
    if (has_buffer) {
      auto bytes = te::napi::get_bytes(info[0], "buffer");
      uint64_t base = reinterpret_cast<uint64_t>(bytes.data);
      if (addr == 0) addr = base;
      if (bytes.length == 0 || !te::range_within(base, bytes.length, addr, length))
        throw_status(env, TE_ADDRESS_OUT_OF_RANGE, "the range to register does not lie inside the given buffer");
    }
    std::vector<uint64_t> keys;
    uint64_t mr_base = 0;
    std::string err;
    Status s = transport_->register_memory(addr, length, remote, &keys, &mr_base, &err);
    if (s != TE_OK) throw_status(env, s, err);
    if (has_buffer) refs_[addr] = Napi::Persistent(info[0]);
    Napi::Object out = Napi::Object::New(env);
    out.Set("addr", Napi::BigInt::New(env, addr));
    out.Set("base", Napi::BigInt::New(env, mr_base));
    Napi::Array k = Napi::Array::New(env, keys.size());
    for (uint32_t i = 0; i < keys.size(); ++i) k.Set(i, Napi::BigInt::New(env, keys[i]));
    out.Set("keys", k);
    return out;
  }

  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[0], "addr");
    auto* w = new UnregisterWorker(env, transport_, addr, [this, addr] { refs_.erase(addr); });
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
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
      r.addr = get_u64(o.Get("addr"), "addr");
      r.length = get_u64(o.Get("length"), "length");
      r.base = get_u64(o.Get("base"), "base");
      Napi::Array k = o.Get("keys").As<Napi::Array>();
      for (uint32_t j = 0; j < k.Length(); ++j) r.keys.push_back(get_u64(k.Get(j), "key"));
      regions.push_back(std::move(r));
    }
    bridge_->hold(env);
    uint64_t id = transport_->open_peer(name, epoch, a, same, regions);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value ClosePeer(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->close_peer(get_u64(info[0], "peer"));
    return info.Env().Undefined();
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
    auto ops = te::napi::get_typed<uint8_t>(info[1], napi_uint8_array, "opcodes");
    auto local = te::napi::get_biguint64(info[2], "localAddrs");
    auto remote = te::napi::get_biguint64(info[3], "remoteAddrs");
    auto lengths = te::napi::get_biguint64(info[4], "lengths");
    if (local.length != ops.length || remote.length != ops.length || lengths.length != ops.length)
      throw_status(env, TE_INVALID_ARGUMENT, "batch arrays must all have the same length");
    const uint8_t* notify = nullptr;
    size_t notify_len = 0;
    static const uint8_t empty = 0;
    if (info.Length() > 5 && !info[5].IsNull() && !info[5].IsUndefined()) {
      auto n = te::napi::get_bytes(info[5], "notify");
      notify = n.length ? n.data : &empty;
      notify_len = n.length;
    }
    bridge_->hold(env);
    uint64_t id = 0;
    std::string err;
    Status s = transport_->submit(peer, ops.data, local.data, remote.data, lengths.data, ops.length, notify, notify_len, &id, &err);
    if (s != TE_OK) {
      bridge_->unhold(env);
      throw_status(env, s, err);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->cancel(get_u64(info[0], "batch"), info[1].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
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

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    shutdown(env);
    refs_.clear();
    return env.Undefined();
  }

  std::shared_ptr<Transport> transport_;
  te::napi::CompletionBridge<Event>* bridge_ = nullptr;
  Napi::FunctionReference on_batch_, on_open_, on_notify_, on_check_;
  std::unordered_map<uint64_t, Napi::Reference<Napi::Value>> refs_;
  bool closed_ = false;
  bool hook_ = false;
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

inline Napi::Value SetErrorFactory(const Napi::CallbackInfo& info) {
  te::napi::addon_data(info.Env()).error_factory = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

inline Napi::Object init(Napi::Env env, Napi::Object exports) {
  exports.Set("FabricTransport", FabricTransport::Init(env));
  exports.Set("discover", Napi::Function::New(env, Discover));
  exports.Set("poolBuffer", Napi::Function::New(env, PoolBuffer));
  exports.Set("setErrorFactory", Napi::Function::New(env, SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, [](const Napi::CallbackInfo& i) {
                return Napi::String::New(i.Env(), te::status_name(i[0].As<Napi::Number>().Int32Value()));
              }));
  exports.Set("processEpoch", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return Napi::BigInt::New(i.Env(), te::process_epoch()); }));
  exports.Set("builtWithLibfabric", Napi::Boolean::New(env, TE_HAVE_LIBFABRIC != 0));
  exports.Set("protocolVersion", Napi::Number::New(env, 1));
  return exports;
}

}  // namespace te::fabric::napi
