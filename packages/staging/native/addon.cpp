// Node-API surface of the staging copier and the checksummer: pools of native threads that
// run checked strided copies, and CRC32C checksums of strided memory, off the JS thread
// and call back on it.
#include <memory>
#include <string>
#include <vector>

#include "checksum_batch.h"
#include "copy_pool.h"
#include "crc32c.h"
#include "strided_copy.h"
#include "te/napi/values.h"

namespace {

using te::staging::ChecksumJob;
using te::staging::CopyJob;
using te::staging::CopyPool;
using te::staging::Region;

std::vector<double> doubles_of(const Napi::Value& v, const char* what) {
  Napi::Env env = v.Env();
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    te::napi::throw_status(env, te::TE_INVALID_ARGUMENT, std::string("Expected `") + what + "` to be a Float64Array");
  }
  auto a = v.As<Napi::Float64Array>();
  std::vector<double> out(a.ElementLength());
  for (size_t i = 0; i < out.size(); i++) {
    double d = a[i];
    if (!(d >= 0 && d <= 9007199254740991.0) || static_cast<double>(static_cast<uint64_t>(d)) != d) {
      te::napi::throw_status(env, te::TE_INVALID_ARGUMENT,
                             std::string("`") + what +
                                 "` holds a value that is not a non-negative safe integer at index " +
                                 std::to_string(i));
    }
    out[i] = d;
  }
  return out;
}

class CopyWorker : public Napi::AsyncWorker {
 public:
  CopyWorker(Napi::Function callback, std::shared_ptr<CopyPool> pool, std::vector<CopyJob> jobs)
      : Napi::AsyncWorker(callback), pool_(std::move(pool)), jobs_(std::move(jobs)) {}

  void Execute() override { pool_->run(jobs_); }
  void OnOK() override { Callback().Call({Env().Null()}); }

 private:
  std::shared_ptr<CopyPool> pool_;
  std::vector<CopyJob> jobs_;
};

// The thread pool a Copier or Checksummer runs on, `threads` (1 to 256) from JS.
std::shared_ptr<CopyPool> pool_of(const Napi::Value& threads_value) {
  uint64_t threads = te::napi::get_u64(threads_value, "threads");
  if (threads < 1 || threads > 256)
    te::napi::throw_status(threads_value.Env(), te::TE_INVALID_ARGUMENT, "Expected `threads` to be from 1 to 256");
  return std::make_shared<CopyPool>(static_cast<size_t>(threads));
}

// Float64Array [base, length, ...] from JS: the only memory later jobs may touch, merged.
std::vector<Region> regions_of(const Napi::Value& value) {
  std::vector<double> v = doubles_of(value, "regions");
  if (v.size() % 2 != 0)
    te::napi::throw_status(value.Env(), te::TE_INVALID_ARGUMENT, "`regions` must hold (base, length) pairs");
  std::vector<Region> regions;
  for (size_t i = 0; i < v.size(); i += 2)
    regions.push_back({static_cast<uint64_t>(v[i]), static_cast<uint64_t>(v[i + 1])});
  return te::staging::merge_regions(std::move(regions));
}

class Copier : public Napi::ObjectWrap<Copier> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Copier",
                       {InstanceMethod("setRegions", &Copier::SetRegions), InstanceMethod("copy", &Copier::Copy),
                        InstanceMethod("threads", &Copier::Threads)});
  }

  explicit Copier(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Copier>(info) { pool_ = pool_of(info[0]); }

 private:
  // setRegions(Float64Array [base, length, ...]): the only memory later copies may touch.
  Napi::Value SetRegions(const Napi::CallbackInfo& info) {
    regions_ = regions_of(info[0]);
    return info.Env().Undefined();
  }

  // copy(Float64Array jobs, callback(err)): checks every job against the regions (throws
  // before any byte moves), then copies on the pool and calls back on the JS thread.
  Napi::Value Copy(const Napi::CallbackInfo& info) {
    std::vector<double> v = doubles_of(info[0], "jobs");
    if (v.size() % te::staging::kJobFields != 0)
      te::napi::throw_status(info.Env(), te::TE_INVALID_ARGUMENT, "`jobs` must hold 9 numbers per copy");
    std::vector<CopyJob> jobs(v.size() / te::staging::kJobFields);
    for (size_t k = 0; k < jobs.size(); k++) {
      const double* f = &v[k * te::staging::kJobFields];
      jobs[k] = CopyJob{static_cast<uint64_t>(f[0]), static_cast<uint64_t>(f[1]), static_cast<uint64_t>(f[2]),
                        static_cast<uint64_t>(f[3]), static_cast<uint64_t>(f[4]), static_cast<uint64_t>(f[5]),
                        static_cast<uint64_t>(f[6]), static_cast<uint64_t>(f[7]), static_cast<uint64_t>(f[8])};
    }
    std::string message;
    int32_t status = te::staging::check_jobs(jobs, regions_, message);
    if (status != te::TE_OK) te::napi::throw_status(info.Env(), status, message);
    auto* worker = new CopyWorker(info[1].As<Napi::Function>(), pool_, std::move(jobs));
    worker->Queue();
    return info.Env().Undefined();
  }

  Napi::Value Threads(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(pool_->threads()));
  }

  std::shared_ptr<CopyPool> pool_;
  std::vector<Region> regions_;
};

class ChecksumWorker : public Napi::AsyncWorker {
 public:
  ChecksumWorker(Napi::Function callback, std::shared_ptr<CopyPool> pool, std::vector<ChecksumJob> jobs)
      : Napi::AsyncWorker(callback), pool_(std::move(pool)), jobs_(std::move(jobs)) {}

  void Execute() override { crcs_ = te::staging::checksum_jobs(*pool_, jobs_); }
  void OnOK() override {
    auto out = Napi::Uint32Array::New(Env(), crcs_.size());
    for (size_t i = 0; i < crcs_.size(); i++) out[i] = crcs_[i];
    Callback().Call({Env().Null(), out});
  }

 private:
  std::shared_ptr<CopyPool> pool_;
  std::vector<ChecksumJob> jobs_;
  std::vector<uint32_t> crcs_;
};

class Checksummer : public Napi::ObjectWrap<Checksummer> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Checksummer",
        {InstanceMethod("setRegions", &Checksummer::SetRegions), InstanceMethod("checksum", &Checksummer::Checksum),
         InstanceMethod("threads", &Checksummer::Threads)});
  }

  explicit Checksummer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Checksummer>(info) {
    pool_ = pool_of(info[0]);
  }

 private:
  // setRegions(Float64Array [base, length, ...]): the only memory later checksums may read.
  Napi::Value SetRegions(const Napi::CallbackInfo& info) {
    regions_ = regions_of(info[0]);
    return info.Env().Undefined();
  }

  // checksum(Float64Array jobs, callback(err, Uint32Array)): checks every job against the
  // regions (throws before any byte is read), then checksums on the pool and calls back on
  // the JS thread with one CRC32C per job.
  Napi::Value Checksum(const Napi::CallbackInfo& info) {
    std::vector<double> v = doubles_of(info[0], "jobs");
    if (v.size() % te::staging::kChecksumFields != 0)
      te::napi::throw_status(info.Env(), te::TE_INVALID_ARGUMENT, "`jobs` must hold 6 numbers per checksum");
    std::vector<ChecksumJob> jobs(v.size() / te::staging::kChecksumFields);
    for (size_t k = 0; k < jobs.size(); k++) {
      const double* f = &v[k * te::staging::kChecksumFields];
      jobs[k] = ChecksumJob{static_cast<uint64_t>(f[0]), static_cast<uint64_t>(f[1]), static_cast<uint64_t>(f[2]),
                            static_cast<uint64_t>(f[3]), static_cast<uint64_t>(f[4]), static_cast<uint64_t>(f[5])};
    }
    std::string message;
    int32_t status = te::staging::check_checksum_jobs(jobs, regions_, message);
    if (status != te::TE_OK) te::napi::throw_status(info.Env(), status, message);
    auto* worker = new ChecksumWorker(info[1].As<Napi::Function>(), pool_, std::move(jobs));
    worker->Queue();
    return info.Env().Undefined();
  }

  Napi::Value Threads(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(pool_->threads()));
  }

  std::shared_ptr<CopyPool> pool_;
  std::vector<Region> regions_;
};

// crc32cHardware(): whether CRC32C runs on the CPU's instruction here (else a table).
Napi::Value Crc32cHardware(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), te::staging::crc32c_hardware());
}

// addressOf(buffer): where a JS buffer's bytes are, so memory registered from JS can be
// named by the same kind of address as memory registered by pointer.
Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  Napi::Value v = info[0];
  if (v.IsTypedArray()) {
    auto a = v.As<Napi::TypedArray>();
    auto* base = static_cast<uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset();
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base)));
  }
  if (v.IsArrayBuffer())
    return Napi::BigInt::New(info.Env(),
                             static_cast<uint64_t>(reinterpret_cast<uintptr_t>(v.As<Napi::ArrayBuffer>().Data())));
  te::napi::throw_status(info.Env(), te::TE_INVALID_ARGUMENT, "Expected an ArrayBuffer or a typed array");
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("setErrorFactory", Napi::Function::New(env, te::napi::SetErrorFactory));
  exports.Set("addressOf", Napi::Function::New(env, AddressOf));
  exports.Set("Copier", Copier::Define(env));
  exports.Set("Checksummer", Checksummer::Define(env));
  exports.Set("crc32cHardware", Napi::Function::New(env, Crc32cHardware));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_staging, Init)
