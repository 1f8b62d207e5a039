// N-API surface of mooncake-tcp (declared for TypeScript in src/binding.ts). Arguments are
// validated in TypeScript; this layer converts them, runs the transport and carries its
// events back through the completion bridge (te/napi/completion_bridge.h).
#include <napi.h>

#include <memory>
#include <unordered_map>

#include "cuda_staging.h"
#include "te/cuda/napi_device.h"
#include "te/napi/native_transport.h"
#include "transport.h"

namespace {

using te::napi::get_u64;
using te::napi::throw_status;
using te::napi::u64_field;

class TcpTransport : public te::napi::NativeTransportWrap<TcpTransport, tetcp::Transport> {
  using Base = te::napi::NativeTransportWrap<TcpTransport, tetcp::Transport>;
  friend Base;

 public:
  static Napi::Function Init(Napi::Env env) {
    return define_class(
        env, "TcpTransport",
        {InstanceMethod("port", &TcpTransport::Port), InstanceMethod("rowsPacked", &TcpTransport::RowsPacked)});
  }

  explicit TcpTransport(const Napi::CallbackInfo& info) : Base(info, "new TcpTransport(options, callbacks)") {
    Napi::Env env = info.Env();
    Napi::Object o = info[0].As<Napi::Object>();
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
    if (te::napi::is_given(o.Get("congestionControl"))) opt.congestion = te::napi::string_field(o, "congestionControl");
    opt.window_bytes = u64_field(o, "windowBytes");
    opt.cancel_grace_ms = static_cast<int>(u64_field(o, "cancelGraceMs"));
    opt.notify_queue_per_peer = u64_field(o, "notifyQueuePerPeer");
    opt.notify_queue_bytes = u64_field(o, "notifyQueueBytes");
    opt.max_connections = u64_field(o, "maxConnections");
    opt.max_connections_per_address = u64_field(o, "maxConnectionsPerAddress");
    opt.handshake_timeout_ms = static_cast<int64_t>(u64_field(o, "handshakeTimeoutMs"));
    opt.idle_timeout_ms = static_cast<int64_t>(u64_field(o, "idleTimeoutMs"));
    opt.busy_poll_us = static_cast<int64_t>(u64_field(o, "busyPollUs"));
    opt.batch_scheduling = o.Get("batchScheduling").ToBoolean().Value();
    opt.coalesce_writes = te::napi::bool_field_or(o, "coalesceWrites", true);
    Napi::Value secret = o.Get("authSecret");
    if (te::napi::is_given(secret)) {
      auto bytes = te::napi::get_bytes(secret, "authSecret");
      opt.secret.assign(bytes.data, bytes.data + bytes.length);
    }

    transport_ = std::make_shared<tetcp::Transport>(opt, event_sink(env, "te:mooncake-tcp"));
    start(env);
  }

 private:
  void deliver_batch(Napi::Env env, uint64_t id) {
    auto b = transport_ ? transport_->take_batch(id) : nullptr;
    if (!b) return;
    std::string msg;
    {
      std::lock_guard<std::mutex> lock(b->err_mu);
      msg = b->error;
    }
    batch_done_of(env, id, *b, msg, b->remote_unconfirmed.load(std::memory_order_acquire));
  }

  /** Arguments `at` and `at + 1` of submit, when given: one side's rows and pitches, one entry per request. */
  static void row_pair(Napi::Env env, const Napi::CallbackInfo& info, size_t at, size_t n, const char* side,
                       const uint32_t** rows, const uint64_t** pitches) {
    if (info.Length() <= at + 1 || !te::napi::is_given(info[at])) return;
    const std::string name(side);
    auto r = te::napi::get_typed<uint32_t>(info[at], napi_uint32_array, (name + "Rows").c_str());
    auto p = te::napi::get_biguint64(info[at + 1], (name + "Pitches").c_str());
    if (r.length != n || p.length != n)
      throw_status(env, te::TE_INVALID_ARGUMENT, name + "Rows and " + name + "Pitches must have one entry per request");
    *rows = r.data;
    *pitches = p.data;
  }

  /**
   * submit(peer, opcodes, local, remote, lengths, notify, localRows?, localPitches?, remoteRows?, remotePitches?,
   * verifyWrites?): the shared submit plus writes from and into strided rows (checked in TypeScript, and again by the
   * core; rows: Uint32Array, pitches: BigUint64Array, each pair given or not) and verified writes (a boolean; wire.h,
   * kFlagDigest).
   */
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    this->check_open(env);
    uint64_t peer = get_u64(info[0], "peer");
    auto batch = te::napi::get_batch(info, 1);
    auto notify = te::napi::get_notify(info, 5);
    tetcp::BatchExtras rows;
    row_pair(env, info, 6, batch.ops.length, "local", &rows.local_rows, &rows.local_pitches);
    row_pair(env, info, 8, batch.ops.length, "remote", &rows.remote_rows, &rows.remote_pitches);
    rows.verify_writes = info.Length() > 10 && info[10].IsBoolean() && info[10].As<Napi::Boolean>().Value();
    this->bridge_->hold(env);
    uint64_t id = 0;
    std::string err;
    te::Status s = transport_->submit(peer, batch.ops.data, batch.local.data, batch.remote.data, batch.lengths.data,
                                      batch.ops.length, notify.data, notify.length, &id, &err, rows);
    if (s != te::TE_OK) {
      this->bridge_->unhold(env);
      throw_status(env, s, err);
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  Napi::Value Port(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), transport_ ? transport_->port() : 0);
  }

  Napi::Value RowsPacked(const Napi::CallbackInfo& info) {
    return Napi::BigInt::New(info.Env(), transport_ ? transport_->rows_packed() : 0);
  }

  // registerMemory(buffer | null, addr: bigint, length: bigint, remoteAccess: boolean, device?: number): bigint
  // device: -1 (or absent) host memory, N >= 0 raw device memory of cuda:N (validated here).
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const RegisterArgs a = register_args(info);
    const uint64_t addr = a.addr, length = a.length;
    int device = tetcp::kHost;
    if (info.Length() > 4 && info[4].IsNumber()) device = info[4].As<Napi::Number>().Int32Value();
    if (device != tetcp::kHost) {
      if (device < 0) throw_status(env, te::TE_INVALID_ARGUMENT, "device must be -1 (host) or a CUDA ordinal");
      if (a.has_buffer)
        throw_status(env, te::TE_INVALID_ARGUMENT,
                     "a JS buffer is host memory; it cannot be registered as cuda:" + std::to_string(device));
      if (length == 0 || addr == 0 || te::range_overflows(addr, length))
        throw_status(env, te::TE_INVALID_ARGUMENT, "cannot register an empty, null or wrapping range");
      std::string why;
      te::Status s = tetcp::check_device_range(addr, length, device, &why);
      if (s != te::TE_OK) throw_status(env, s, why);
      // Listed as device memory before the registry publishes it: a request arriving in
      // between passes the registry's check and must not be copied as host memory (memcpy
      // into device memory). Delisted again when the registry refuses it.
      uint64_t token = transport_->devices().add(addr, length, device);
      s = transport_->registry().add(addr, length, a.remote);
      if (s != te::TE_OK) transport_->devices().remove(addr, token);
      throw_unless_registered(env, s);
      device_tokens_[addr] = token;
      return Napi::BigInt::New(env, addr);
    }
    return Napi::BigInt::New(env, register_host_memory(info, a));
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
    return unregister_memory(info, "te:mooncake-tcp:unregister",
                             [token](tetcp::Transport& t, uint64_t addr, std::string* err) {
                               te::Status s = t.registry().remove(addr);
                               if (s == te::TE_OK && token != 0)
                                 t.devices().remove(addr, token);
                               else if (s != te::TE_OK)
                                 *err = te::napi::no_region_at(addr);
                               return s;
                             });
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
    return Napi::Number::New(env, static_cast<double>(transport_->open_peer(host, port, epoch, name, local, 0)));
  }

  // JS thread only: the DeviceMap token of each registered device region, by address.
  std::unordered_map<uint64_t, uint64_t> device_tokens_;
};

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("TcpTransport", TcpTransport::Init(env));
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("statusName", Napi::Function::New(env, te::napi::StatusName));
  exports.Set("processEpoch", Napi::Function::New(env, te::napi::ProcessEpoch));
  exports.Set("protocolVersion", Napi::Number::New(env, tetcp::kVersion));
  exports.Set("builtWithCuda", Napi::Boolean::New(env, tetcp::built_with_cuda()));
  // The CUDA layer's own probe and device tools (te/cuda/napi_device.h), as @te/cuda reads them.
  exports.Set("probeCuda", Napi::Function::New(env, te::cuda::napi::Probe));
  exports.Set("deviceMemory", te::cuda::napi::device_memory_object(env));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_mooncake_tcp, Init)
