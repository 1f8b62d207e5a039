// N-API surface of mooncake-shm (declared for TypeScript in src/binding.ts). Arguments are
// validated in TypeScript; this layer converts them, runs the transport and carries its
// events back through a thread-safe function.
#include <napi.h>

#include <cstdio>
#include <memory>

#include "copy.h"
#include "te/napi/transport_wrap.h"
#include "transport.h"

namespace {

using te::napi::get_u64;
using te::napi::throw_status;
using te::napi::u64_field;
using teshm::Event;

class ShmTransport : public te::napi::TransportWrap<ShmTransport, teshm::Transport, Event> {
  using Base = te::napi::TransportWrap<ShmTransport, teshm::Transport, Event>;
  friend Base;

 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "ShmTransport",
                       {InstanceMethod("registerMemory", &ShmTransport::RegisterMemory),
                        InstanceMethod("unregisterMemory", &ShmTransport::UnregisterMemory),
                        InstanceMethod("openPeer", &ShmTransport::OpenPeer),
                        InstanceMethod("closePeer", &ShmTransport::ClosePeer),
                        InstanceMethod("submit", &ShmTransport::Submit),
                        InstanceMethod("cancel", &ShmTransport::Cancel),
                        InstanceMethod("close", &ShmTransport::Close)});
  }

  explicit ShmTransport(const Napi::CallbackInfo& info) : Base(info, "new ShmTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object o = info[0].As<Napi::Object>();
    Napi::Object cb = info[1].As<Napi::Object>();
    on_batch_ = te::napi::callback_field(cb, "onBatch");
    on_open_ = te::napi::callback_field(cb, "onOpen");
    on_notify_ = te::napi::callback_field(cb, "onNotify");
    on_log_ = te::napi::callback_field(cb, "onLog");

    teshm::Options opt;
    opt.segment_name = te::napi::string_field(o, "segmentName");
    opt.epoch = u64_field(o, "epoch");
    opt.socket_name = te::napi::string_field(o, "socketName");
    opt.copy_threads = static_cast<uint32_t>(u64_field(o, "copyThreads"));
    opt.chunk_bytes = u64_field(o, "chunkBytes");
    opt.max_outstanding = static_cast<uint32_t>(u64_field(o, "maxOutstanding"));
    opt.max_connections = static_cast<uint32_t>(u64_field(o, "maxConnections"));
    if (te::napi::is_given(o.Get("handshakeTimeoutMs"))) opt.handshake_timeout_ms = static_cast<int>(u64_field(o, "handshakeTimeoutMs"));
    opt.connect_timeout_ms = static_cast<int>(u64_field(o, "connectTimeoutMs"));
    opt.cancel_grace_ms = static_cast<int>(u64_field(o, "cancelGraceMs"));
    opt.notify_queue_per_peer = u64_field(o, "notifyQueuePerPeer");
    opt.notify_queue_bytes = u64_field(o, "notifyQueueBytes");

    auto* bridge = create_bridge(env, "te:mooncake-shm");
    transport_ = std::make_shared<teshm::Transport>(opt, [bridge](Event e) { bridge->push(std::move(e)); });
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
        int32_t bs = b->cancel_status != 0 ? b->cancel_status : b->batch_status;
        unhold(env);
        te::napi::call_on_batch(env, on_batch_, e.id, bs, statuses, bytes, b->error);
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

  // registerMemory(buffer | null, addr: bigint, length: bigint, remoteAccess: boolean, hugePages: boolean): string
  // Returns what the huge-page hint achieved ("collapsed", "hinted; ...", "off").
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[1], "addr");
    uint64_t length = get_u64(info[2], "length");
    bool remote = info[3].ToBoolean().Value();
    bool huge = info[4].ToBoolean().Value();
    bool has_buffer = te::napi::is_given(info[0]);
    if (has_buffer) te::napi::check_buffer_range(info[0], addr, length);
    te::Status s = transport_->registry().add(addr, length, remote);
    if (s == te::TE_MEMORY_OVERLAP) throw_status(env, s, "memory overlaps a registered region");
    if (s != te::TE_OK) throw_status(env, s, "cannot register an empty or wrapping range");
    if (has_buffer) keep_buffer(addr, info[0]);
    std::string hint = huge ? teshm::prefer_huge_pages(addr, length) : "off";
    Napi::Object out = Napi::Object::New(env);
    out.Set("addr", Napi::BigInt::New(env, addr));
    out.Set("hugePages", hint);
    return out;
  }

  // unregisterMemory(addr: bigint): Promise<void> (waits until no copy touches it)
  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    return unregister_memory(info, "te:mooncake-shm:unregister", [](teshm::Transport& t, uint64_t addr, std::string* err) {
      te::Status s = t.registry().remove(addr);
      if (s != te::TE_OK) {
        char b[64];
        snprintf(b, sizeof b, "no registered memory starts at 0x%llx", static_cast<unsigned long long>(addr));
        *err = b;
      }
      return s;
    });
  }

  // openPeer(socketName, epoch: bigint, name): number (peer id; onOpen reports)
  Napi::Value OpenPeer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    std::string socket = info[0].As<Napi::String>().Utf8Value();
    uint64_t epoch = get_u64(info[1], "epoch");
    std::string name = info[2].As<Napi::String>().Utf8Value();
    bridge_->hold(env);
    return Napi::Number::New(env, static_cast<double>(transport_->open_peer(socket, epoch, name)));
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
};

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("ShmTransport", ShmTransport::Init(env));
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  exports.Set("protocolVersion", Napi::Number::New(env, teshm::kVersion));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_mooncake_shm, Init)
