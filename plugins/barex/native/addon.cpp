// barex: the shared libfabric transport (native/fabric) with its pre-registered pool, plus
// what the build found of the vendor library accl-barex (reported, never linked).
#include "te/fabric/napi_addon.h"

namespace {
Napi::Object Init(Napi::Env env, Napi::Object exports) {
  te::fabric::napi::init(env, exports);
  exports.Set("vendorLibrary", Napi::String::New(env, TE_BAREX_VENDOR_LIB));
  return exports;
}
}  // namespace

NODE_API_MODULE(te_barex, Init)
