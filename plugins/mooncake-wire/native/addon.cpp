// N-API surface of mooncake-wire (declared for TypeScript in src/binding.ts). Arguments are
// validated in TypeScript; this layer converts them, runs the transport and carries batch
// completions back through the shared completion bridge.
#include <napi.h>

#include <memory>

#include "te/napi/transport_wrap.h"
#include "transport.h"

namespace {

using te::napi::get_u64;
using te::napi::throw_status;
using te::napi::u64_field;

struct Event {
  uint64_t id = 0;
};

class WireTransport : public te::napi::TransportWrap<WireTransport, mcwire::Transport, Event> {
  using Base = te::napi::TransportWrap<WireTransport, mcwire::Transport, Event>;
  friend Base;

 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(
        env, "WireTransport",
        {InstanceMethod("port", &WireTransport::Port), InstanceMethod("registerMemory", &WireTransport::RegisterMemory),
         InstanceMethod("unregisterMemory", &WireTransport::UnregisterMemory),
         InstanceMethod("openPeer", &WireTransport::OpenPeer), InstanceMethod("closePeer", &WireTransport::ClosePeer),
         InstanceMethod("submit", &WireTransport::Submit), InstanceMethod("cancel", &WireTransport::Cancel),
         InstanceMethod("stats", &WireTransport::Stats), InstanceMethod("close", &WireTransport::Close)});
  }

  explicit WireTransport(const Napi::CallbackInfo& info) : Base(info, "new WireTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object o = info[0].As<Napi::Object>();
    on_batch_ = te::napi::callback_field(info[1].As<Napi::Object>(), "onBatch");
    mcwire::TransportOptions opt;
    opt.listen = te::napi::bool_field_or(o, "listen", false);
    opt.target.bind_address = te::napi::string_field(o, "bindAddress");
    opt.target.port = static_cast<uint16_t>(u64_field(o, "port"));
    opt.target.max_connections = static_cast<uint32_t>(u64_field(o, "maxConnections"));
    opt.target.max_per_address = static_cast<uint32_t>(u64_field(o, "maxConnectionsPerAddress"));
    opt.target.max_waiting = static_cast<uint32_t>(u64_field(o, "maxWaitingConnections"));
    opt.target.idle_ms = static_cast<int>(u64_field(o, "idleTimeoutMs"));
    opt.target.io_ms = static_cast<int>(u64_field(o, "ioTimeoutMs"));
    opt.initiator.connect_ms = static_cast<int>(u64_field(o, "connectTimeoutMs"));
    opt.initiator.io_ms = static_cast<int>(u64_field(o, "ioTimeoutMs"));
    opt.initiator.max_queued = u64_field(o, "maxQueued");
    auto* bridge = create_bridge(env, "te:mooncake-wire");
    transport_ = std::make_shared<mcwire::Transport>(opt, [bridge](uint64_t id) { bridge->push(Event{id}); });
    start(env);
  }

 private:
  void deliver(Napi::Env env, Event& e) {
    auto b = transport_ ? transport_->initiator().take_batch(e.id) : nullptr;
    if (!b) return;
    auto statuses = Napi::Int32Array::New(env, b->n);
    uint64_t bytes = 0;
    int32_t first = 0;
    for (size_t i = 0; i < b->n; ++i) {
      int32_t st = b->statuses[i].load();
      statuses[i] = st;
      if (st == te::TE_OK)
        bytes += b->lengths[i];
      else if (first == 0)
        first = st;
    }
    int32_t c = b->cancel_status.load();
    unhold(env);
    te::napi::call_on_batch(env, on_batch_, e.id, c != 0 && first == c ? c : 0, statuses, bytes, b->error,
                            b->may_be_written.load());
  }

  Napi::Value Port(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), transport_ ? transport_->port() : 0);
  }

  // registerMemory(buffer | null, addr: bigint, length: bigint, remoteAccess: boolean): bigint
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    return Napi::BigInt::New(info.Env(), register_host_memory(info));
  }

  // unregisterMemory(addr: bigint): Promise<void> (waits until no request touches it)
  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    return unregister_registered(info, "te:mooncake-wire:unregister");
  }

  // openPeer({host, port, v2, pool, lanes, bufferAddrs: BigUint64Array, bufferLengths: BigUint64Array}): number
  Napi::Value OpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    Napi::Object o = info[0].As<Napi::Object>();
    mcwire::PeerOptions p;
    p.host = te::napi::string_field(o, "host");
    p.port = static_cast<uint16_t>(u64_field(o, "port"));
    p.v2 = te::napi::bool_field_or(o, "v2", true);
    p.pool = te::napi::bool_field_or(o, "pool", true);
    p.lanes = static_cast<uint32_t>(u64_field(o, "lanes"));
    auto addrs = te::napi::get_biguint64(o.Get("bufferAddrs"), "bufferAddrs");
    auto lengths = te::napi::get_biguint64(o.Get("bufferLengths"), "bufferLengths");
    if (addrs.length != lengths.length)
      throw_status(env, te::TE_INVALID_ARGUMENT, "bufferAddrs and bufferLengths differ in length");
    for (size_t i = 0; i < addrs.length; ++i) p.buffers.emplace_back(addrs.data[i], lengths.data[i]);
    return Napi::Number::New(env, static_cast<double>(transport_->initiator().open_peer(p)));
  }

  // submit(peer, opcodes, local, remote, lengths, timeoutMs): number
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto batch = te::napi::get_batch(info, 1);
    uint64_t timeout_ms = get_u64(info[5], "timeoutMs");
    uint64_t id = 0;
    std::string err;
    bridge_->hold(env);
    te::Status s = transport_->initiator().submit(peer, batch.ops.data, batch.local.data, batch.remote.data,
                                                  batch.lengths.data, batch.ops.length, timeout_ms, &id, &err);
    if (s != te::TE_OK) {
      unhold(env);
      throw_status(env, s, err);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  // stats(): what the data listener served, and connections the initiator opened
  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object out = Napi::Object::New(env);
    if (!transport_) return out;
    out.Set("connectionsOpened",
            Napi::Number::New(env, static_cast<double>(transport_->initiator().connections_opened())));
    if (auto* t = transport_->target()) {
      auto& c = t->counters();
      auto set = [&](const char* k, uint64_t v) { out.Set(k, Napi::Number::New(env, static_cast<double>(v))); };
      set("writes", c.writes);
      set("reads", c.reads);
      set("bytesWritten", c.bytes_written);
      set("bytesRead", c.bytes_read);
      set("v2Requests", c.v2_requests);
      set("v1Requests", c.v1_requests);
      set("rejected", c.rejected);
      set("truncated", c.truncated);
      set("timeouts", c.timeouts);
      set("connectionsAccepted", c.connections);
      set("connectionsRefused", c.refused_connections);
      set("connectionsWaited", c.waited_connections);
      set("connectionsOpen", t->open_connections());
    }
    return out;
  }

  /** TransportWrap, once closed: onBatch closes over the JS object that owns this one. */
  void release_callbacks() { on_batch_.Reset(); }

  Napi::FunctionReference on_batch_;
};

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("WireTransport", WireTransport::Init(env));
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_mooncake_wire, Init)
