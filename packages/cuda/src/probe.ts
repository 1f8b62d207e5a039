import type { ProbeResult } from '@te/connector';
import type { NativeCudaModule } from './native-types.js';

/**
 * `te doctor`'s view of a CUDA plugin: available when a device is usable; otherwise the
 * reason names the failing call and the CUDA error ("no CUDA device: cudaGetDeviceCount
 * failed: cudaErrorInsufficientDriver (...); libcuda.so.1 not found (...)").
 */
export function probeCuda(load: () => NativeCudaModule, extra: (native: NativeCudaModule) => Record<string, unknown> = () => ({})): ProbeResult {
  let native: NativeCudaModule;
  try {
    native = load();
  } catch (e) {
    return { available: false, reason: (e as Error).message };
  }
  const p = native.probe();
  const details: Record<string, unknown> = {
    backend: native.backend,
    builtWithCuda: p.builtWithCuda,
    ...(p.toolkitVersion ? { toolkit: p.toolkitVersion } : {}),
    cudaRuntime: p.runtimeVersion,
    cudaDriver: p.driverVersion,
    libcuda: p.libcudaLoaded ? 'loaded' : 'not loaded',
    devices: p.devices.map((d) => ({
      device: `cuda:${d.ordinal}`,
      name: d.name,
      pciBusId: d.pciBusId,
      cc: d.computeCapability,
      vmm: d.vmm,
      fabric: d.fabric,
      posixFd: d.posixFd,
    })),
    ...extra(native),
  };
  if (p.devices.length === 0) return { available: false, reason: p.reason || 'no CUDA device', details };
  return { available: true, details };
}
