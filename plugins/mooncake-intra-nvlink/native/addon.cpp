// N-API entry of mooncake-intra-nvlink: the shared CUDA transport surface with the IPC backend.
#include <napi.h>

#include "ipc_backend.h"
#include "te/cuda/napi_transport.h"

namespace {

struct Traits {
  static constexpr const char* kName = "te:mooncake-intra-nvlink";
  static std::shared_ptr<te::cuda::Backend> make(Napi::Object) { return std::make_shared<teipc::IpcBackend>(); }
};

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  te::cuda::napi::init<Traits>(env, exports);
  exports.Set("backend", Napi::String::New(env, "cuda-ipc"));
  return exports;
}

}  // namespace

NODE_API_MODULE(te_mooncake_intra_nvlink, Init)
