// N-API surface of mooncake-shm (declared for TypeScript in src/binding.ts). Arguments are
// validated in TypeScript; this layer converts them, runs the transport and carries its
// events back through the completion bridge (te/napi/completion_bridge.h).
#include <napi.h>

#include <memory>

#include "copy.h"
#include "te/napi/native_transport.h"
#include "transport.h"

namespace {

using te::napi::get_u64;
using te::napi::u64_field;

class ShmTransport : public te::napi::NativeTransportWrap<ShmTransport, teshm::Transport> {
  using Base = te::napi::NativeTransportWrap<ShmTransport, teshm::Transport>;
  friend Base;

 public:
  static Napi::Function Init(Napi::Env env) {
    return define_class(env, "ShmTransport",
                        {InstanceMethod("allocateMemory", &ShmTransport::AllocateMemory),
                         InstanceMethod("freeMemory", &ShmTransport::FreeMemory),
                         InstanceMethod("copyStats", &ShmTransport::CopyStats)});
  }

  explicit ShmTransport(const Napi::CallbackInfo& info) : Base(info, "new ShmTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object o = info[0].As<Napi::Object>();
    teshm::Options opt;
    opt.segment_name = te::napi::string_field(o, "segmentName");
    opt.epoch = u64_field(o, "epoch");
    opt.socket_name = te::napi::string_field(o, "socketName");
    opt.copy_threads = static_cast<uint32_t>(u64_field(o, "copyThreads"));
    opt.chunk_bytes = u64_field(o, "chunkBytes");
    opt.max_outstanding = static_cast<uint32_t>(u64_field(o, "maxOutstanding"));
    opt.max_connections = static_cast<uint32_t>(u64_field(o, "maxConnections"));
    if (te::napi::is_given(o.Get("handshakeTimeoutMs")))
      opt.handshake_timeout_ms = static_cast<int>(u64_field(o, "handshakeTimeoutMs"));
    opt.connect_timeout_ms = static_cast<int>(u64_field(o, "connectTimeoutMs"));
    opt.cancel_grace_ms = static_cast<int>(u64_field(o, "cancelGraceMs"));
    opt.notify_queue_per_peer = u64_field(o, "notifyQueuePerPeer");
    opt.notify_queue_bytes = u64_field(o, "notifyQueueBytes");
    opt.batch_scheduling = o.Get("batchScheduling").ToBoolean().Value();

    transport_ = std::make_shared<teshm::Transport>(opt, event_sink(env, "te:mooncake-shm"));
    start(env);
  }

 private:
  void deliver_batch(Napi::Env env, uint64_t id) {
    auto b = transport_ ? transport_->take_batch(id) : nullptr;
    if (b) batch_done_of(env, id, *b, b->error);
  }

  // registerMemory(buffer | null, addr: bigint, length: bigint, remoteAccess: boolean, hugePages: boolean): string
  // Returns what the huge-page hint achieved ("collapsed", "hinted; ...", "off").
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const RegisterArgs a = register_args(info);
    uint64_t addr = register_host_memory(info, a);
    std::string hint = info[4].ToBoolean().Value() ? teshm::prefer_huge_pages(addr, a.length) : "off";
    Napi::Object out = Napi::Object::New(env);
    out.Set("addr", Napi::BigInt::New(env, addr));
    out.Set("hugePages", hint);
    return out;
  }

  // unregisterMemory(addr: bigint): Promise<void> (waits until no copy touches it)
  Napi::Value UnregisterMemory(const Napi::CallbackInfo& info) {
    return unregister_registered(info, "te:mooncake-shm:unregister");
  }

  // allocateMemory(length: bigint, view: boolean): { addr: bigint, buffer?: ArrayBuffer }
  // (pool memory, see pools.h). `view` false: no ArrayBuffer, for a length past what this
  // Node.js takes in one (4 GiB on Node 20): an external ArrayBuffer that V8 refuses has its
  // finalizer run by the failed call and again by node-addon-api, a double free.
  Napi::Value AllocateMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t len = get_u64(info[0], "length");
    bool view = info[1].ToBoolean().Value();
    std::shared_ptr<teshm::LocalPool> pool;
    std::string err;
    te::Status s = transport_->allocate_pool(len, &pool, &err);
    if (s != te::TE_OK) te::napi::throw_status(env, s, err);
    Napi::Object out = Napi::Object::New(env);
    out.Set("addr", Napi::BigInt::New(env, pool->base));
    if (!view) return out;
    // The view holds the mapping: it stays valid after freeMemory until the view is collected.
    auto* hold = new std::shared_ptr<teshm::LocalPool>(pool);
    Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(
        env, reinterpret_cast<void*>(pool->base), static_cast<size_t>(pool->len),
        [](Napi::Env, void*, std::shared_ptr<teshm::LocalPool>* h) { delete h; }, hold);
    out.Set("buffer", buffer);
    return out;
  }

  // freeMemory(addr: bigint): void (unregistered first; MEMORY_IN_USE while registered)
  Napi::Value FreeMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    std::string err;
    te::Status s = transport_->free_pool(get_u64(info[0], "addr"), &err);
    if (s != te::TE_OK) te::napi::throw_status(env, s, err);
    return env.Undefined();
  }

  // copyStats(): { poolChunks, processVmChunks, poolsMapped, completionMessages } (this process as a target)
  Napi::Value CopyStats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    check_open(env);
    teshm::ServerStats s = transport_->server_stats();
    Napi::Object out = Napi::Object::New(env);
    out.Set("poolChunks", Napi::Number::New(env, static_cast<double>(s.pool_chunks)));
    out.Set("processVmChunks", Napi::Number::New(env, static_cast<double>(s.process_vm_chunks)));
    out.Set("poolsMapped", Napi::Number::New(env, static_cast<double>(s.pools_mapped)));
    out.Set("completionMessages", Napi::Number::New(env, static_cast<double>(s.completion_messages)));
    return out;
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
