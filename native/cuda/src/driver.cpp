#include "te/cuda/driver.h"

#if TE_HAVE_CUDA
#include <dlfcn.h>

#include <mutex>

namespace te::cuda {

namespace {

struct Loaded {
  DriverApi api{};
  bool ok = false;
  std::string why;
};

template <typename F>
bool sym(void* lib, const char* name, F& out, std::string& why) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (!out) why = std::string("libcuda.so.1 lacks ") + name + " (driver too old for this build)";
  return out != nullptr;
}

Loaded load() {
  Loaded l;
  // RTLD_NODELETE: the driver is never unloaded under a live context.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char* e = dlerror();
    l.why = std::string("libcuda.so.1 not found (dlopen: ") + (e ? e : "unknown error") +
            "): no NVIDIA driver is installed on this machine";
    return l;
  }
  DriverApi& a = l.api;
  std::string& w = l.why;
  bool ok = sym(lib, "cuInit", a.cuInit, w) && sym(lib, "cuDriverGetVersion", a.cuDriverGetVersion, w) &&
            sym(lib, "cuGetErrorName", a.cuGetErrorName, w) && sym(lib, "cuGetErrorString", a.cuGetErrorString, w) &&
            sym(lib, "cuDeviceGetCount", a.cuDeviceGetCount, w) && sym(lib, "cuDeviceGet", a.cuDeviceGet, w) &&
            sym(lib, "cuDeviceGetAttribute", a.cuDeviceGetAttribute, w) &&
            sym(lib, "cuMemGetAddressRange_v2", a.cuMemGetAddressRange, w) &&
            sym(lib, "cuPointerGetAttribute", a.cuPointerGetAttribute, w) &&
            sym(lib, "cuMemGetAllocationGranularity", a.cuMemGetAllocationGranularity, w) &&
            sym(lib, "cuMemCreate", a.cuMemCreate, w) && sym(lib, "cuMemRelease", a.cuMemRelease, w) &&
            sym(lib, "cuMemAddressReserve", a.cuMemAddressReserve, w) &&
            sym(lib, "cuMemAddressFree", a.cuMemAddressFree, w) && sym(lib, "cuMemMap", a.cuMemMap, w) &&
            sym(lib, "cuMemUnmap", a.cuMemUnmap, w) && sym(lib, "cuMemSetAccess", a.cuMemSetAccess, w) &&
            sym(lib, "cuMemExportToShareableHandle", a.cuMemExportToShareableHandle, w) &&
            sym(lib, "cuMemImportFromShareableHandle", a.cuMemImportFromShareableHandle, w);
  if (!ok) return l;
  CUresult r = a.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    a.cuGetErrorName(r, &name);
    a.cuGetErrorString(r, &text);
    l.why = std::string("cuInit failed: ") + (name ? name : "?") + " (" + (text ? text : "") + ")";
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

const DriverApi* driver(std::string* why) {
  static Loaded loaded = load();
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace te::cuda
#endif
