import { definePlugin, PLUGIN_API_VERSION, type ProbeResult } from '@te/connector';
import { deviceMemoryOf, type DeviceMemory } from '@te/cuda';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { tcpOptions } from './options.js';
import { createTcpTransport } from './transport.js';

export { tcpOptions, type TcpOptions } from './options.js';
export { MooncakeTcpTransport, createTcpTransport, type TcpEndpoint } from './transport.js';

export const VERSION = '0.1.0';

/** What the CUDA staging path can do here: 'built without CUDA', 'no CUDA device: ...', or the devices. */
function cudaSummary(native: ReturnType<typeof loadBinding>): string {
  if (!native.builtWithCuda) return 'built without CUDA (host memory only)';
  const p = native.probeCuda();
  if (p.devices.length === 0) return p.reason;
  return `staged through pinned host buffers; ${p.devices.map((d) => `cuda:${d.ordinal} ${d.name}`).join(', ')}`;
}

function probe(): ProbeResult {
  try {
    const native = loadBinding();
    // Host memory works everywhere: a missing GPU only limits what can be registered.
    return { available: true, details: { protocolVersion: native.protocolVersion, cuda: cudaSummary(native), authentication: 'hmac-sha256 (built in)' } };
  } catch (e) {
    return { available: false, reason: (e as Error).message };
  }
}

/**
 * cudaMalloc'ed memory and host<->device copies from this addon's CUDA layer, for tests and
 * tools without another CUDA library in Node (synchronous: not for a serving hot path).
 * Every call throws NO_DEVICE with the CUDA reason where there is no GPU.
 */
export const deviceMemory: DeviceMemory = deviceMemoryOf(loadBinding, PLUGIN_NAME);

/** mooncake-tcp: one-sided READ/WRITE over persistent multi-lane TCP connections. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'tcp',
    // cuda: raw device memory ({addr, length, device: 'cuda:N'}) is staged through pinned
    // host buffers; registering it fails with NO_DEVICE where there is no GPU, and with
    // MEMORY_KIND_UNSUPPORTED when the addon was built without the CUDA toolkit.
    memoryKinds: ['cpu', 'cuda'],
    read: true,
    notifications: true,
    maxInFlight: 8192,
    rawAddresses: true,
    // A write's rows (a head slice of NHD pages) go out as one iovec each, and a write into
    // remote rows is received straight into them (WRITE_ROWS): no staging copy on either side.
    gatherWrites: true,
    scatterWrites: true,
    // An XXH3 digest of each write's bytes as sent and as landed, compared before the write
    // is done (wire.h, kFlagDigest).
    verifiedWrites: true,
  },
  options: tcpOptions,
  probe,
  create: createTcpTransport,
});
