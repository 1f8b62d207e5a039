// The Node-API glue every transport addon shares: the lifecycle of the JS transport object
// (completion bridge, env cleanup hook, idempotent shutdown), the methods that are the same
// in every addon, and readers for the arguments they share. Header-only: only addons include
// it. An addon derives its class from TransportWrap and keeps only what is its own.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "te/epoch.h"
#include "te/memory_registry.h"
#include "te/napi/completion_bridge.h"
#include "te/napi/values.h"

namespace te::napi {

/** processEpoch(): this process's epoch, which peers use to tell a restarted process apart. */
inline Napi::Value ProcessEpoch(const Napi::CallbackInfo& info) {
  return Napi::BigInt::New(info.Env(), te::process_epoch());
}

/** A callback from the constructor's callbacks object, kept for the object's lifetime. */
inline Napi::FunctionReference callback_field(const Napi::Object& callbacks, const char* key) {
  return Napi::Persistent(callbacks.Get(key).As<Napi::Function>());
}

/** submit's batch arrays: opcodes (Uint8Array), then local/remote addresses and lengths (BigUint64Array). */
struct BatchArrays {
  Span<uint8_t> ops;
  Span<const uint64_t> local, remote, lengths;
};

/** The batch arrays at info[first..first+3]; they must all have the same length. */
inline BatchArrays get_batch(const Napi::CallbackInfo& info, size_t first) {
  BatchArrays b;
  b.ops = get_typed<uint8_t>(info[first], napi_uint8_array, "opcodes");
  b.local = get_biguint64(info[first + 1], "localAddrs");
  b.remote = get_biguint64(info[first + 2], "remoteAddrs");
  b.lengths = get_biguint64(info[first + 3], "lengths");
  if (b.local.length != b.ops.length || b.remote.length != b.ops.length || b.lengths.length != b.ops.length)
    throw_status(info.Env(), TE_INVALID_ARGUMENT, "batch arrays must all have the same length");
  return b;
}

/**
 * submit's optional notify payload at info[i]: {nullptr, 0} when not given. A given but
 * empty payload still gets a non-null pointer: the transport sends a notify only for those.
 */
inline Span<const uint8_t> get_notify(const Napi::CallbackInfo& info, size_t i) {
  static const uint8_t empty = 0;
  if (info.Length() <= i || !is_given(info[i])) return {};
  auto n = get_bytes(info[i], "notify");
  return {n.length ? n.data : &empty, n.length};
}

/**
 * registerMemory's JS buffer: `addr` 0 stands for its start, and the range to register must
 * lie inside it (native code will read and write it).
 */
inline void check_buffer_range(const Napi::Value& buffer, uint64_t& addr, uint64_t length) {
  auto bytes = get_bytes(buffer, "buffer");
  uint64_t base = reinterpret_cast<uint64_t>(bytes.data);
  if (addr == 0) addr = base;
  if (bytes.length == 0 || !range_within(base, bytes.length, addr, length))
    throw_status(buffer.Env(), TE_ADDRESS_OUT_OF_RANGE, "the range to register does not lie inside the given buffer");
}

/** "no registered memory starts at 0x…": unregisterMemory's message for an unknown address. */
inline std::string no_region_at(uint64_t addr) {
  char b[64];
  snprintf(b, sizeof b, "no registered memory starts at 0x%llx", static_cast<unsigned long long>(addr));
  return b;
}

/** Copies per-request statuses into the Int32Array onBatch hands to JS. */
inline Napi::Int32Array int32_array(Napi::Env env, const std::vector<int32_t>& v) {
  auto a = Napi::Int32Array::New(env, v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = v[i];
  return a;
}

/**
 * onBatch(id, status, statuses, bytes: bigint, message, remoteMayBeWritten: boolean).
 * `remote_may_be_written`: a write of the batch settled while bytes it had already sent may
 * still land at the peer (the peer did not confirm that it discarded them).
 */
inline void call_on_batch(Napi::Env env, const Napi::FunctionReference& fn, uint64_t id, int32_t status,
                          Napi::Int32Array statuses, uint64_t bytes, const std::string& message,
                          bool remote_may_be_written = false) {
  fn.Call({Napi::Number::New(env, static_cast<double>(id)), Napi::Number::New(env, status), statuses,
           Napi::BigInt::New(env, bytes), Napi::String::New(env, message),
           Napi::Boolean::New(env, remote_may_be_written)});
}

/** onOpen / onCheck(id, status, message). */
inline void call_on_status(Napi::Env env, const Napi::FunctionReference& fn, uint64_t id, int32_t status,
                           const std::string& message) {
  fn.Call({Napi::Number::New(env, static_cast<double>(id)), Napi::Number::New(env, status),
           Napi::String::New(env, message)});
}

/** onNotify(from, payload: Buffer); the payload is copied because the event owns its bytes. */
inline void call_on_notify(Napi::Env env, const Napi::FunctionReference& fn, const std::string& from,
                           const std::vector<uint8_t>& payload) {
  fn.Call({Napi::String::New(env, from), Napi::Buffer<uint8_t>::Copy(env, payload.data(), payload.size())});
}

/**
 * CRTP base of a transport's JS object. It owns the native transport, the completion bridge
 * that hands its events one by one to Derived::deliver(env, event) on the JS thread, and the JS
 * buffers registered memory points into. Derived must befriend it (deliver may be private),
 * and Transport must offer close(), close_peer(id) and cancel(id, status), and, for
 * register_host_memory and unregister_registered, `registry()` (a te::MemoryRegistry).
 *
 * Shutdown happens once, from whichever comes first: close(), the env cleanup hook (the env
 * is torn down with the object still open), or the destructor (the object is collected).
 *
 * Derived may define `release_callbacks()` (the JS callbacks it holds). It runs on the JS
 * thread once close() has delivered the last event: the callbacks close over the JS object
 * that owns this one, so holding them past close would keep a closed transport, and all it
 * references, alive for the life of the process.
 */
template <typename Derived, typename Transport, typename Event>
class TransportWrap : public Napi::ObjectWrap<Derived> {
 public:
  // Runs after Derived's members are gone; shutdown touches only what this base owns.
  ~TransportWrap() override { shutdown(nullptr); }

 protected:
  using Bridge = CompletionBridge<Event>;
  /** Unregisters memory at `addr`: a status, and a message in `*err` where it fails. */
  using RemoveMemory = std::function<int32_t(Transport&, uint64_t addr, std::string* err)>;

  /** Checks `new X(options, callbacks)`: TypeScript validated their contents, not their presence. */
  TransportWrap(const Napi::CallbackInfo& info, const char* usage) : Napi::ObjectWrap<Derived>(info) {
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsObject())
      throw_status(info.Env(), TE_INVALID_ARGUMENT, usage);
  }

  /** Creates the bridge; returned so the transport's event sink can push into it. */
  Bridge* create_bridge(Napi::Env env, const char* name) {
    bridge_ = Bridge::create(env, name, [this](Napi::Env e, std::vector<Event>& events) {
      for (Event& event : events) {
        Napi::HandleScope scope(e);  // one drain may carry many events: free each one's handles
        static_cast<Derived*>(this)->deliver(e, event);
      }
    });
    return bridge_;
  }

  /**
   * For transports with a start step: starts transport_, then watches the env. If it fails
   * nothing runs yet, so the bridge is closed at once and the object stays closed.
   */
  void start(Napi::Env env) {
    std::string err;
    Status s = transport_->start(&err);
    if (s != TE_OK) {
      transport_.reset();
      bridge_->close(env);
      bridge_ = nullptr;
      closed_ = true;
      throw_status(env, s, err);
    }
    add_cleanup_hook(env);
  }

  /** Once the transport runs: an env torn down before close() must still stop its threads. */
  void add_cleanup_hook(Napi::Env env) {
    napi_add_env_cleanup_hook(env, &TransportWrap::cleanup_hook, this);
    hook_ = true;
  }

  void check_open(Napi::Env env) {
    if (closed_) throw_status(env, TE_ABORTED, "transport is closed");
  }

  /** JS thread, on delivering an event that ends a pending operation (see CompletionBridge::hold). */
  void unhold(Napi::Env env) {
    if (bridge_) bridge_->unhold(env);
  }

  /**
   * Keeps a registered JS buffer alive until its memory is unregistered or the transport
   * closed (addons that register only raw addresses never call it).
   */
  void keep_buffer(uint64_t addr, const Napi::Value& buffer) { refs_[addr] = Napi::Persistent(buffer); }
  void forget_buffer(uint64_t addr) { refs_.erase(addr); }

  /** registerMemory's leading arguments: (buffer | null, addr, length, remoteAccess). */
  struct RegisterArgs {
    uint64_t addr = 0;
    uint64_t length = 0;
    bool remote = false;
    bool has_buffer = false;  // info[0] is a JS buffer the range lies in
  };

  /** Reads registerMemory's leading arguments (info[0..3]) once the transport is known to be open. */
  RegisterArgs register_args(const Napi::CallbackInfo& info) {
    check_open(info.Env());
    RegisterArgs a;
    a.addr = get_u64(info[1], "addr");
    a.length = get_u64(info[2], "length");
    a.remote = info[3].ToBoolean().Value();
    a.has_buffer = is_given(info[0]);
    return a;
  }

  /**
   * registerMemory's host part for cores with a MemoryRegistry (`registry()`): the range,
   * inside the JS buffer where one is given (kept alive then), joins the registry. Returns
   * its start address (the buffer's start where `addr` was 0).
   */
  uint64_t register_host_memory(const Napi::CallbackInfo& info, RegisterArgs a) {
    if (a.has_buffer) check_buffer_range(info[0], a.addr, a.length);
    throw_unless_registered(info.Env(), transport_->registry().add(a.addr, a.length, a.remote));
    if (a.has_buffer) keep_buffer(a.addr, info[0]);
    return a.addr;
  }
  uint64_t register_host_memory(const Napi::CallbackInfo& info) {
    return register_host_memory(info, register_args(info));
  }

  static void throw_unless_registered(Napi::Env env, Status s) {
    if (s == TE_MEMORY_OVERLAP) throw_status(env, s, "memory overlaps a registered region");
    if (s != TE_OK) throw_status(env, s, "cannot register an empty or wrapping range");
  }

  /** unregisterMemory(addr): Promise<void> for cores with a MemoryRegistry (waits out accesses in flight). */
  Napi::Value unregister_registered(const Napi::CallbackInfo& info, const char* resource) {
    return unregister_memory(info, resource, [](Transport& t, uint64_t addr, std::string* err) {
      Status s = t.registry().remove(addr);
      if (s != TE_OK) *err = no_region_at(addr);
      return s;
    });
  }

  /**
   * unregisterMemory(addr): Promise<void>. `remove` runs on a worker thread because it waits
   * until no access to the memory is in flight.
   */
  Napi::Value unregister_memory(const Napi::CallbackInfo& info, const char* resource, RemoveMemory remove) {
    Napi::Env env = info.Env();
    check_open(env);
    uint64_t addr = get_u64(info[0], "addr");
    auto* w = new UnregisterWorker(env, resource, this->Value(), transport_, addr, std::move(remove),
                                   [this, addr] { refs_.erase(addr); });
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }

  Napi::Value ClosePeer(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->close_peer(get_u64(info[0], "peer"));
    return info.Env().Undefined();
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    if (!closed_) transport_->cancel(get_u64(info[0], "batch"), info[1].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  /**
   * close(): Promise<void>. Stopping a transport joins its threads and waits for work that
   * cannot be recalled (a CUDA copy in flight, posted RMA): that runs on a worker thread, so
   * the JS thread never blocks on it. Methods refuse work from the call on; the completions
   * of batches cut short (ABORTED) are delivered before the promise resolves.
   */
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto deferred = Napi::Promise::Deferred::New(env);
    if (closed_ || !transport_) {
      shutdown(env);
      refs_.clear();
      deferred.Resolve(env.Undefined());
      return deferred.Promise();
    }
    closed_ = true;
    closing_ = true;
    (new CloseWorker(env, this->Value(), transport_, deferred, [this](Napi::Env e) { finish_close(e); }))->Queue();
    return deferred.Promise();
  }

  /** Derived's JS callbacks, dropped once closed (see the class comment); Derived hides it. */
  void release_callbacks() {}

  std::shared_ptr<Transport> transport_;
  Bridge* bridge_ = nullptr;
  bool closed_ = false;

 private:
  // The workers below hold the JS object (`owner`) until they completed: their completion
  // calls back into this object, which must not be collected while they run.
  class CloseWorker : public Napi::AsyncWorker {
   public:
    CloseWorker(Napi::Env env, Napi::Object owner, std::shared_ptr<Transport> t, Napi::Promise::Deferred deferred,
                std::function<void(Napi::Env)> done)
        : Napi::AsyncWorker(env, "te:close"),
          owner_(Napi::Persistent(owner)),
          t_(std::move(t)),
          deferred_(deferred),
          done_(std::move(done)) {}
    void Execute() override { t_->close(); }
    void OnOK() override {
      done_(Env());
      deferred_.Resolve(Env().Undefined());
    }

   private:
    Napi::ObjectReference owner_;
    std::shared_ptr<Transport> t_;
    Napi::Promise::Deferred deferred_;
    std::function<void(Napi::Env)> done_;
  };

  /**
   * JS thread, after an asynchronous close: deliver what is queued, release the bridge, then
   * the callbacks. Never called from inside a delivery, so no listener is running when the
   * callbacks go (a listener may call close() again; that call leaves them alone).
   */
  void finish_close(Napi::Env env) {
    // Not closing any more where a second close() or the env cleanup hook got there first
    // (shutdown delivered and released the bridge); the callbacks still go.
    if (closing_) {
      closing_ = false;
      if (bridge_) bridge_->close(env);
      bridge_ = nullptr;
      if (hook_) napi_remove_env_cleanup_hook(env, &TransportWrap::cleanup_hook, this);
      hook_ = false;
      refs_.clear();
    }
    static_cast<Derived*>(this)->release_callbacks();
  }

  class UnregisterWorker : public Napi::AsyncWorker {
   public:
    UnregisterWorker(Napi::Env env, const char* resource, Napi::Object owner, std::shared_ptr<Transport> t,
                     uint64_t addr, RemoveMemory remove, std::function<void()> done)
        : Napi::AsyncWorker(env, resource),
          owner_(Napi::Persistent(owner)),
          deferred_(Napi::Promise::Deferred::New(env)),
          t_(std::move(t)),
          addr_(addr),
          remove_(std::move(remove)),
          done_(std::move(done)) {}
    Napi::Promise promise() { return deferred_.Promise(); }
    void Execute() override { status_ = remove_(*t_, addr_, &err_); }
    void OnOK() override {
      if (status_ == TE_OK) {
        done_();
        deferred_.Resolve(Env().Undefined());
      } else {
        deferred_.Reject(make_error(Env(), status_, err_));
      }
    }

   private:
    Napi::ObjectReference owner_;
    Napi::Promise::Deferred deferred_;
    std::shared_ptr<Transport> t_;  // the transport outlives the job even if closed meanwhile
    uint64_t addr_;
    RemoveMemory remove_;
    std::function<void()> done_;
    int32_t status_ = TE_OK;
    std::string err_;
  };

  static void cleanup_hook(void* arg) {
    auto* self = static_cast<TransportWrap*>(arg);
    self->hook_ = false;
    self->shutdown(nullptr);
  }

  // Stops the transport's threads first, then the bridge: no producer may outlive it.
  void shutdown(napi_env env) {
    if (closed_ && !closing_) return;
    closed_ = true;
    closing_ = false;  // an asynchronous close in progress is finished here (close is idempotent)
    if (transport_) transport_->close();
    if (bridge_) bridge_->close(env);
    bridge_ = nullptr;
    if (hook_ && env) napi_remove_env_cleanup_hook(env, &TransportWrap::cleanup_hook, this);
    hook_ = false;
  }

  std::unordered_map<uint64_t, Napi::Reference<Napi::Value>> refs_;
  bool hook_ = false;
  bool closing_ = false;  // close() handed to a worker, not finished yet
};

}  // namespace te::napi
