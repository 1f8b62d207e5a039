import { definePlugin, PLUGIN_API_VERSION, type ProbeResult } from '@te/connector';
import { cudaEventsOf, deviceMemoryOf, probeCuda } from '@te/cuda';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { nvlinkOptions } from './options.js';
import { createNvlinkTransport } from './transport.js';

export { nvlinkOptions, type NvlinkOptions } from './options.js';
export { MooncakeNvlinkTransport, createNvlinkTransport } from './transport.js';
export { allocateFabricMemory, freeFabricMemory, findFabricAllocation, type FabricAllocation, type AllocateOptions } from './allocator.js';
export type { HandleType } from './binding.js';

export const VERSION = '0.1.0';

/** cudaMalloc'ed scratch memory and host<->device copies for tests and tools (synchronous). */
export const deviceMemory = deviceMemoryOf(loadBinding, PLUGIN_NAME);

/**
 * CUDA events recorded on a stream and awaited off the JS thread, e.g. as the layerwise
 * `layerReady(layer, cudaEvents.readyAfter(stream))` promise; NO_DEVICE without a GPU.
 */
export const cudaEvents = cudaEventsOf(loadBinding, PLUGIN_NAME);

function probe(): ProbeResult {
  return probeCuda(loadBinding, (native) => {
    const devices = native.probe().devices;
    return {
      handleTypes: {
        fabric: devices.some((d) => d.fabric) ? 'supported' : 'not supported by any visible GPU (needs a multi-node NVLink fabric + IMEX)',
        'posix-fd': devices.some((d) => d.posixFd) ? 'supported' : 'not supported by any visible GPU',
      },
    };
  });
}

/** mooncake-nvlink: multi-node NVLink (MNNVL) over cuMem VMM handles. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'nvlink',
    memoryKinds: ['cuda'],
    read: true,
    notifications: false,
    maxInFlight: 65536,
    rawAddresses: true,
  },
  options: nvlinkOptions,
  probe,
  create: createNvlinkTransport,
});
