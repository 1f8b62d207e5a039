// mooncake-rdma: the shared libfabric transport (native/fabric) exposed as this plugin's addon.
#include "te/fabric/napi_addon.h"

namespace {
Napi::Object Init(Napi::Env env, Napi::Object exports) { return te::fabric::napi::init(env, exports); }
}  // namespace

NODE_API_MODULE(te_mooncake_rdma, Init)
