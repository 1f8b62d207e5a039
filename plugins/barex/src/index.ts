import { definePlugin, PLUGIN_API_VERSION, type ProbeResult, type Transport, type TransportContext } from '@te/connector';
import { probeFabricFromEnv, requireLibfabric } from '@te/fabric';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { barexOptions, ENV_PREFIX, type BarexOptions } from './options.js';
import { BarexTransport } from './transport.js';

export { barexOptions, type BarexOptions } from './options.js';
export { BarexTransport, allocate, free, poolStats, checkSegment, type PoolAllocation, type PoolStats } from './transport.js';
export type { SegmentHealth } from '@te/fabric';

export const VERSION = '0.1.0';

const MODEL = 'BAREX memory-pool model implemented over libfabric by te; the vendor library accl-barex is not used';

function vendor(): string {
  try {
    return loadBinding().vendorLibrary || 'not found at build time';
  } catch {
    return 'unknown (addon not loaded)';
  }
}

function probe(): ProbeResult {
  return probeFabricFromEnv(loadBinding, PLUGIN_NAME, ENV_PREFIX, { model: MODEL, vendorLibrary: vendor() });
}

export async function createBarexTransport(context: TransportContext, options: BarexOptions): Promise<Transport> {
  const native = loadBinding();
  requireLibfabric(native, PLUGIN_NAME);
  return new BarexTransport(native, context, options);
}

/** barex: BAREX's pre-registered memory pool, eager channels and segment checks, over libfabric. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'rdma',
    memoryKinds: ['cpu'],
    read: true,
    notifications: true,
    maxInFlight: 4096,
    rawAddresses: true,
    // Its pool only, unless allowExternalMemory: engine.allocateMemory asks barex first.
    ownMemoryOnly: true,
  },
  options: barexOptions,
  probe,
  create: createBarexTransport,
});
