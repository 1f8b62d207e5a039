// The N-API face of the CUDA layer's device tools (header-only: only addons include it):
// `probe()` (what te_cuda found: toolkit, runtime, driver, devices, or why there is no
// device) and `deviceMemory` (plain cudaMalloc memory and synchronous copies, for tests and
// tools). Exported by every addon that links te_cuda, so each plugin's TypeScript side reads
// them through @te/cuda instead of declaring them again.
#pragma once

#include <napi.h>

#include <string>

#include "te/cuda/device.h"
#include "te/cuda/memory_tools.h"
#include "te/napi/values.h"

namespace te::cuda::napi {

using te::napi::get_u64;
using te::napi::throw_status;

[[noreturn]] inline void throw_error(Napi::Env env, const Error& e) { throw_status(env, e.status, e.message); }

inline Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ProbeInfo p = probe();
  Napi::Object o = Napi::Object::New(env);
  o.Set("builtWithCuda", p.built_with_cuda);
  o.Set("toolkitVersion", p.toolkit_version);
  o.Set("runtimeVersion", p.runtime_version);
  o.Set("driverVersion", p.driver_version);
  o.Set("libcudaLoaded", p.libcuda_loaded);
  o.Set("reason", p.no_device_reason);
  Napi::Array devs = Napi::Array::New(env, p.devices.size());
  for (size_t i = 0; i < p.devices.size(); ++i) {
    const DeviceInfo& d = p.devices[i];
    Napi::Object x = Napi::Object::New(env);
    x.Set("ordinal", d.ordinal);
    x.Set("name", d.name);
    x.Set("pciBusId", d.pci_bus_id);
    x.Set("totalMemory", Napi::BigInt::New(env, d.total_memory));
    x.Set("computeCapability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor));
    x.Set("vmm", d.vmm);
    x.Set("fabric", d.fabric);
    x.Set("posixFd", d.posix_fd);
    devs.Set(static_cast<uint32_t>(i), x);
  }
  o.Set("devices", devs);
  return o;
}

inline int device_arg(const Napi::Value& v) { return static_cast<int>(get_u64(v, "device")); }

inline Napi::Value DeviceAlloc(const Napi::CallbackInfo& info) {
  uint64_t out = 0;
  Error e = device_alloc(device_arg(info[0]), get_u64(info[1], "bytes"), &out);
  if (!e.ok()) throw_error(info.Env(), e);
  return Napi::BigInt::New(info.Env(), out);
}
inline Napi::Value DeviceFree(const Napi::CallbackInfo& info) {
  Error e = device_free(device_arg(info[0]), get_u64(info[1], "addr"));
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value CopyToDevice(const Napi::CallbackInfo& info) {
  auto src = te::napi::get_bytes(info[2], "source");
  Error e = copy_to_device(device_arg(info[0]), get_u64(info[1], "dst"), src.data, src.length);
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value CopyToHost(const Napi::CallbackInfo& info) {
  auto dst = te::napi::get_bytes(info[1], "destination");
  Error e = copy_to_host(device_arg(info[0]), dst.data, get_u64(info[2], "src"), dst.length);
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value Memset(const Napi::CallbackInfo& info) {
  Error e = device_memset(device_arg(info[0]), get_u64(info[1], "dst"), static_cast<int>(get_u64(info[2], "value")),
                          get_u64(info[3], "bytes"));
  if (!e.ok()) throw_error(info.Env(), e);
  return info.Env().Undefined();
}
inline Napi::Value BaselineCopy(const Napi::CallbackInfo& info) {
  double s = 0;
  Error e = baseline_copy(device_arg(info[0]), get_u64(info[1], "dst"), get_u64(info[2], "src"),
                          get_u64(info[3], "bytes"), static_cast<int>(get_u64(info[4], "iterations")), &s);
  if (!e.ok()) throw_error(info.Env(), e);
  return Napi::Number::New(info.Env(), s);
}

/** The `deviceMemory` object: alloc, free, copyToDevice, copyToHost, memset, baselineCopy. */
inline Napi::Object device_memory_object(Napi::Env env) {
  Napi::Object mem = Napi::Object::New(env);
  mem.Set("alloc", Napi::Function::New(env, DeviceAlloc));
  mem.Set("free", Napi::Function::New(env, DeviceFree));
  mem.Set("copyToDevice", Napi::Function::New(env, CopyToDevice));
  mem.Set("copyToHost", Napi::Function::New(env, CopyToHost));
  mem.Set("memset", Napi::Function::New(env, Memset));
  mem.Set("baselineCopy", Napi::Function::New(env, BaselineCopy));
  return mem;
}

}  // namespace te::cuda::napi
