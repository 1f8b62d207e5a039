#include "te/cuda/device.h"

#include <mutex>

#include "te/cuda/driver.h"

#if TE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace te::cuda {

#if !TE_HAVE_CUDA

ProbeInfo probe() {
  ProbeInfo p;
  p.no_device_reason = built_without_cuda_reason();
  return p;
}
Error use_device(int) { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }
Error require_devices() { return Error::make(TE_NO_DEVICE, built_without_cuda_reason()); }

#else

namespace {

ProbeInfo detect() {
  ProbeInfo p;
  p.built_with_cuda = true;
  p.toolkit_version = TE_CUDA_TOOLKIT_VERSION;
  cudaRuntimeGetVersion(&p.runtime_version);
  cudaDriverGetVersion(&p.driver_version);
  std::string why_driver;
  const DriverApi* d = driver(&why_driver);
  p.libcuda_loaded = d != nullptr;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls report their own
    p.no_device_reason = "no CUDA device: " + runtime_error_text("cudaGetDeviceCount", e);
    if (!d) p.no_device_reason += "; " + why_driver;
    return p;
  }
  if (count == 0) {
    p.no_device_reason = "no CUDA device: cudaGetDeviceCount reports 0 devices (check CUDA_VISIBLE_DEVICES)";
    return p;
  }
  if (!d) {
    p.no_device_reason = "no CUDA device: " + why_driver;
    return p;
  }
  for (int i = 0; i < count; ++i) {
    DeviceInfo info;
    info.ordinal = i;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      info.name = prop.name;
      info.total_memory = prop.totalGlobalMem;
      info.compute_major = prop.major;
      info.compute_minor = prop.minor;
    }
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) info.pci_bus_id = bus;
    CUdevice dev = 0;
    if (d->cuDeviceGet(&dev, i) == CUDA_SUCCESS) {
      int v = 0;
      if (d->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) == CUDA_SUCCESS)
        info.vmm = v != 0;
      v = 0;
      if (d->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev) == CUDA_SUCCESS)
        info.fabric = v != 0;
      v = 0;
      if (d->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) ==
          CUDA_SUCCESS)
        info.posix_fd = v != 0;
    }
    p.devices.push_back(info);
  }
  cudaGetLastError();
  return p;
}

std::mutex probe_mu;
bool probed = false;
ProbeInfo cached;

}  // namespace

ProbeInfo probe() {
  std::lock_guard<std::mutex> lock(probe_mu);
  if (!probed) {
    cached = detect();
    probed = true;
  }
  return cached;
}

Error require_devices() {
  ProbeInfo p = probe();
  if (p.devices.empty()) return Error::make(TE_NO_DEVICE, p.no_device_reason);
  return Error::none();
}

Error use_device(int device) {
  ProbeInfo p = probe();
  if (p.devices.empty()) return Error::make(TE_NO_DEVICE, p.no_device_reason);
  if (device < 0 || device >= static_cast<int>(p.devices.size()))
    return Error::make(TE_NO_DEVICE, "no CUDA device cuda:" + std::to_string(device) + " (this process sees " +
                                         std::to_string(p.devices.size()) + " device(s); check CUDA_VISIBLE_DEVICES)");
  // Checked each time (cheap): other code in the process may switch devices on this thread.
  thread_local uint64_t initialised = 0;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return runtime_error("cudaSetDevice", e);
  }
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (!(initialised & bit)) {
    cudaError_t e = cudaFree(nullptr);  // creates the primary context now, so driver API calls see it
    if (e != cudaSuccess) return runtime_error("cudaFree(0) (context creation)", e);
    initialised |= bit;
  }
  return Error::none();
}

#endif

}  // namespace te::cuda
