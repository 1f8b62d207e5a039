import { definePlugin, PLUGIN_API_VERSION, type ProbeResult } from '@te/connector';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { cudaEventsOf, deviceMemoryOf } from '@te/cuda';
import { probeCuda } from '@te/cuda';
import { intraNvlinkOptions } from './options.js';
import { createIntraNvlinkTransport } from './transport.js';

export { intraNvlinkOptions, type IntraNvlinkOptions } from './options.js';
export { MooncakeIntraNvlinkTransport, createIntraNvlinkTransport } from './transport.js';
export type { DeviceMemory, CudaEvents } from '@te/cuda';

export const VERSION = '0.1.0';

/** cudaMalloc'ed memory and host<->device copies for tests, benchmarks and tools (synchronous). */
export const deviceMemory = deviceMemoryOf(loadBinding, PLUGIN_NAME);

/**
 * CUDA events recorded on a stream and awaited off the JS thread, e.g. as the layerwise
 * `layerReady(layer, cudaEvents.readyAfter(stream))` promise; NO_DEVICE without a GPU.
 */
export const cudaEvents = cudaEventsOf(loadBinding, PLUGIN_NAME);

function probe(): ProbeResult {
  return probeCuda(loadBinding);
}

/** mooncake-intra-nvlink: GPU-to-GPU copies between processes of one node over CUDA IPC. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'intra-nvlink',
    memoryKinds: ['cuda'],
    read: true,
    notifications: false,
    maxInFlight: 65536,
    rawAddresses: true,
  },
  options: intraNvlinkOptions,
  probe,
  create: createIntraNvlinkTransport,
});
