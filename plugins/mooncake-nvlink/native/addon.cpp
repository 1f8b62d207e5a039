// N-API entry of mooncake-nvlink: the shared CUDA transport surface with the cuMem VMM
// backend, plus the fabric-memory allocator.
#include <napi.h>

#include "allocator.h"
#include "fd_server.h"
#include "te/cuda/device.h"
#include "te/cuda/napi_transport.h"
#include "vmm_backend.h"

namespace {

using te::cuda::napi::throw_error;
using te::napi::get_u64;
using te::napi::throw_status;

int handle_type_of(const Napi::Value& v) {
  std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "fabric") return tenvl::kFabric;
  if (s == "posix-fd") return tenvl::kPosixFd;
  throw_status(v.Env(), te::TE_INVALID_ARGUMENT, "Expected `handleType` to be \"fabric\" or \"posix-fd\"");
}

struct Traits {
  static constexpr const char* kName = "te:mooncake-nvlink";
  static std::shared_ptr<te::cuda::Backend> make(Napi::Object options) {
    Napi::Value t = options.Get("connectTimeoutMs");
    int timeout = t.IsNumber() ? t.As<Napi::Number>().Int32Value() : 5000;
    auto b =
        std::make_shared<tenvl::VmmBackend>(handle_type_of(options.Get("handleType")), timeout > 0 ? timeout : 5000);
    te::cuda::Error e = b->start();
    if (!e.ok()) throw_error(options.Env(), e);
    return b;
  }
};

// allocate(device, bytes, handleTypes: string[]): {addr, size, id}
Napi::Value Allocate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int device = static_cast<int>(get_u64(info[0], "device"));
  uint64_t bytes = get_u64(info[1], "bytes");
  int types = handle_type_of(info[2]);
  te::cuda::Error e = te::cuda::use_device(device);
  if (!e.ok()) throw_error(env, e);
  tenvl::Allocation a;
  e = tenvl::allocate(device, bytes, types, &a);
  if (!e.ok()) throw_error(env, e);
  Napi::Object o = Napi::Object::New(env);
  o.Set("addr", Napi::BigInt::New(env, a.addr));
  o.Set("size", Napi::BigInt::New(env, a.size));
  o.Set("id", Napi::BigInt::New(env, a.id));
  o.Set("device", Napi::Number::New(env, a.device));
  return o;
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  te::cuda::Error e = tenvl::release(get_u64(info[0], "addr"));
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}

// findAllocation(addr, length): {addr, size, device, handleType} | null
Napi::Value FindAllocation(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  tenvl::Allocation a;
  if (!tenvl::find(get_u64(info[0], "addr"), get_u64(info[1], "length"), &a)) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("addr", Napi::BigInt::New(env, a.addr));
  o.Set("size", Napi::BigInt::New(env, a.size));
  o.Set("device", Napi::Number::New(env, a.device));
  o.Set("handleType", Napi::String::New(env, a.handle_types == tenvl::kFabric ? "fabric" : "posix-fd"));
  return o;
}

Napi::Value AllocationCount(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(tenvl::count()));
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  te::cuda::napi::init<Traits>(env, exports);
  exports.Set("backend", Napi::String::New(env, "cumem-vmm"));
  Napi::Object alloc = Napi::Object::New(env);
  alloc.Set("allocate", Napi::Function::New(env, Allocate));
  alloc.Set("free", Napi::Function::New(env, Free));
  alloc.Set("find", Napi::Function::New(env, FindAllocation));
  alloc.Set("count", Napi::Function::New(env, AllocationCount));
  exports.Set("allocator", alloc);
  exports.Set("fdServerName", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                return Napi::String::New(info.Env(), tenvl::fd_server_name());
              }));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_mooncake_nvlink, Init)
