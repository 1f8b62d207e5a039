// barex: the shared libfabric transport (native/fabric) with barex's pre-registered pool as
// its arena, the pool's allocator, and what the build found of the vendor library accl-barex
// (reported, never linked).
#include "pool.h"
#include "te/fabric/napi_addon.h"

namespace {

using te::barex::Pool;
using te::napi::get_u64;
using te::napi::throw_status;

// Why a registration outside the pool is refused, after "memory at X (N bytes) lies outside ".
constexpr const char* kOutsidePool =
    "the barex pool: barex transfers only memory allocated from its pre-registered pool "
    "(allocate() from @te/barex); set allowExternalMemory (TE_BAREX_ALLOW_EXTERNAL=1) to register other memory "
    "individually, at the per-buffer registration cost the pool avoids";

/** The transport's options hook: the process pool (created on first use) becomes its arena. */
void use_pool(Napi::Env env, const Napi::Object& o, te::fabric::Options& opt) {
  uint64_t size = te::napi::u64_field_or(o, "poolSize", 0);
  if (size == 0) return;
  Pool* pool = nullptr;
  std::string err;
  te::Status s = Pool::instance(size, &pool, &err);
  if (s != te::TE_OK) throw_status(env, s, err);
  opt.arena_base = pool->base();
  opt.arena_size = pool->size();
  if (te::napi::bool_field_or(o, "poolStrict", false)) opt.outside_arena = kOutsidePool;
}

Pool* existing_pool(Napi::Env env) {
  Pool* p = Pool::existing();
  if (!p) throw_status(env, te::TE_INVALID_ARGUMENT, "this process has no barex pool");
  return p;
}

// poolAlloc(bytes: bigint): bigint (POOL_EXHAUSTED when no free range fits)
Napi::Value PoolAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t addr = 0;
  std::string err;
  te::Status s = existing_pool(env)->allocate(get_u64(info[0], "bytes"), &addr, &err);
  if (s != te::TE_OK) throw_status(env, s, err);
  return Napi::BigInt::New(env, addr);
}

// poolFree(addr: bigint): void (the caller checked that no transport still registers it)
Napi::Value PoolFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string err;
  te::Status s = existing_pool(env)->free(get_u64(info[0], "addr"), &err);
  if (s != te::TE_OK) throw_status(env, s, err);
  return env.Undefined();
}

// poolStats(): {base, size, used: bigint, allocations: number} (zeros before a pool exists)
Napi::Value PoolStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t base = 0, size = 0, used = 0, n = 0;
  if (Pool* p = Pool::existing()) {
    base = p->base();
    size = p->size();
    p->stats(&used, &n);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("base", Napi::BigInt::New(env, base));
  o.Set("size", Napi::BigInt::New(env, size));
  o.Set("used", Napi::BigInt::New(env, used));
  o.Set("allocations", Napi::Number::New(env, static_cast<double>(n)));
  return o;
}

/**
 * The process pool as one ArrayBuffer (created once: V8 refuses two external buffers over
 * the same memory). Views of it are what `allocate()` hands out.
 */
Napi::Value PoolBuffer(const Napi::CallbackInfo& info) {
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

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  te::fabric::napi::init(env, exports, use_pool);
  exports.Set("poolAlloc", Napi::Function::New(env, PoolAlloc));
  exports.Set("poolFree", Napi::Function::New(env, PoolFree));
  exports.Set("poolStats", Napi::Function::New(env, PoolStats));
  exports.Set("poolBuffer", Napi::Function::New(env, PoolBuffer));
  exports.Set("vendorLibrary", Napi::String::New(env, TE_BAREX_VENDOR_LIB));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_barex, Init)
