// Helpers to read typed values from N-API arguments and to throw te errors. Header-only:
// only addons include it (the core library itself does not depend on Node).
#pragma once

#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif
#include <napi.h>

#include <cstdint>
#include <string>

#include "te/status.h"

namespace te::napi {

/** Per-addon data: the JS factory that turns (status, message) into a TransferError. */
struct AddonData {
  Napi::FunctionReference error_factory;
};

inline AddonData& addon_data(Napi::Env env) {
  AddonData* d = env.GetInstanceData<AddonData>();
  if (!d) {
    d = new AddonData();
    env.SetInstanceData<AddonData>(d);
  }
  return *d;
}

/** Builds the JS error for a native status: the registered factory's TransferError, else an Error with `status`/`code`.
 */
inline Napi::Value make_error(Napi::Env env, int32_t status, const std::string& message) {
  AddonData& d = addon_data(env);
  if (!d.error_factory.IsEmpty()) {
    return d.error_factory.Call({Napi::Number::New(env, status), Napi::String::New(env, message)});
  }
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("status", Napi::Number::New(env, status));
  e.Set("code", Napi::String::New(env, status_name(status)));
  return e.Value();
}

[[noreturn]] inline void throw_status(Napi::Env env, int32_t status, const std::string& message) {
  throw Napi::Error(env, make_error(env, status, message));
}

/** setErrorFactory(factory): the TypeScript side registers how TransferErrors are built. */
inline Napi::Value SetErrorFactory(const Napi::CallbackInfo& info) {
  addon_data(info.Env()).error_factory = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

/** statusName(status): the native status name, so both sides name statuses alike. */
inline Napi::Value StatusName(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), status_name(info[0].As<Napi::Number>().Int32Value()));
}

/** Optional arguments and fields are "not given" when undefined or null. */
inline bool is_given(const Napi::Value& v) { return !v.IsUndefined() && !v.IsNull(); }

/** A u64 from a BigInt (lossless) or a non-negative safe-integer Number. */
inline uint64_t get_u64(const Napi::Value& v, const char* what) {
  Napi::Env env = v.Env();
  if (v.IsBigInt()) {
    bool lossless = false;
    uint64_t x = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) throw_status(env, TE_INVALID_ARGUMENT, std::string("Expected `") + what + "` to be a u64 bigint");
    return x;
  }
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    if (d >= 0 && d <= 9007199254740991.0 && static_cast<double>(static_cast<uint64_t>(d)) == d)
      return static_cast<uint64_t>(d);
  }
  throw_status(env, TE_INVALID_ARGUMENT, std::string("Expected `") + what + "` to be a non-negative integer (bigint)");
}

/** Field `key` of an options object as a u64; the key names it in the error. */
inline uint64_t u64_field(const Napi::Object& o, const char* key) { return get_u64(o.Get(key), key); }

/** Like u64_field, but `fallback` where the field is not given. */
inline uint64_t u64_field_or(const Napi::Object& o, const char* key, uint64_t fallback) {
  Napi::Value v = o.Get(key);
  return is_given(v) ? get_u64(v, key) : fallback;
}

/** Field `key` as a string (TypeScript guarantees one; anything else throws). */
inline std::string string_field(const Napi::Object& o, const char* key) {
  return o.Get(key).As<Napi::String>().Utf8Value();
}

/** Field `key` as a string, or "" where it is not one. */
inline std::string string_field_or_empty(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  return v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
}

/** Field `key` as a boolean, or `fallback` where it is not one. */
inline bool bool_field_or(const Napi::Object& o, const char* key, bool fallback) {
  Napi::Value v = o.Get(key);
  return v.IsBoolean() ? v.As<Napi::Boolean>().Value() : fallback;
}

template <typename T>
struct Span {
  T* data = nullptr;
  size_t length = 0;
};

/**
 * A typed array of the given element type; throws INVALID_ARGUMENT otherwise. Uses the raw
 * napi_get_typedarray_info data pointer, which also works for SharedArrayBuffer-backed arrays.
 */
template <typename T>
inline Span<T> get_typed(const Napi::Value& v, napi_typedarray_type type, const char* what) {
  Napi::Env env = v.Env();
  napi_typedarray_type actual;
  size_t length = 0;
  void* data = nullptr;
  if (!v.IsTypedArray() || napi_get_typedarray_info(env, v, &actual, &length, &data, nullptr, nullptr) != napi_ok ||
      actual != type)
    throw_status(env, TE_INVALID_ARGUMENT,
                 std::string("Expected `") + what + "` to be a " +
                     (type == napi_biguint64_array ? "BigUint64Array"
                      : type == napi_uint8_array   ? "Uint8Array"
                      : type == napi_int32_array   ? "Int32Array"
                      : type == napi_uint32_array  ? "Uint32Array"
                                                   : "typed array"));
  return Span<T>{static_cast<T*>(data), length};
}

inline Span<const uint64_t> get_biguint64(const Napi::Value& v, const char* what) {
  auto s = get_typed<uint64_t>(v, napi_biguint64_array, what);
  return {s.data, s.length};
}

/**
 * Raw bytes of an ArrayBuffer, TypedArray, DataView or Buffer (views may be backed by a
 * SharedArrayBuffer; a bare SharedArrayBuffer has no Node-API accessor at NAPI 8, so the
 * TypeScript side wraps it in a Uint8Array first).
 */
inline Span<uint8_t> get_bytes(const Napi::Value& v, const char* what) {
  Napi::Env env = v.Env();
  void* data = nullptr;
  size_t len = 0;
  if (v.IsArrayBuffer()) {
    if (napi_get_arraybuffer_info(env, v, &data, &len) == napi_ok) return {static_cast<uint8_t*>(data), len};
  } else if (v.IsTypedArray()) {
    napi_typedarray_type type;
    size_t count = 0;
    if (napi_get_typedarray_info(env, v, &type, &count, &data, nullptr, nullptr) == napi_ok)
      return {static_cast<uint8_t*>(data), v.As<Napi::TypedArray>().ByteLength()};
  } else if (v.IsDataView()) {
    if (napi_get_dataview_info(env, v, &len, &data, nullptr, nullptr) == napi_ok)
      return {static_cast<uint8_t*>(data), len};
  }
  throw_status(env, TE_INVALID_ARGUMENT,
               std::string("Expected `") + what + "` to be an ArrayBuffer or ArrayBufferView");
}

}  // namespace te::napi
