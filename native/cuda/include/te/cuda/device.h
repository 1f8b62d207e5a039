// Device discovery and per-thread device selection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "te/cuda/errors.h"

namespace te::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string pci_bus_id;
  uint64_t total_memory = 0;
  int compute_major = 0, compute_minor = 0;
  bool vmm = false;       // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  bool fabric = false;    // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
  bool posix_fd = false;  // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
};

struct ProbeInfo {
  bool built_with_cuda = false;
  std::string toolkit_version;  // of the build
  int runtime_version = 0;      // cudaRuntimeGetVersion
  int driver_version = 0;       // cudaDriverGetVersion (0: no driver)
  bool libcuda_loaded = false;
  std::vector<DeviceInfo> devices;
  /** Empty when at least one device is usable; else "no CUDA device: <call> failed: <error>; ...". */
  std::string no_device_reason;
};

/** Detects the driver and devices (cached after the first successful look). */
ProbeInfo probe();

/**
 * Makes `device` current on the calling thread (cudaSetDevice, then forces its primary
 * context so driver API calls work). NO_DEVICE with the precise reason when there is none.
 */
Error use_device(int device);

/** NO_DEVICE error with the probe's reason, or none() when a device exists. */
Error require_devices();

}  // namespace te::cuda
