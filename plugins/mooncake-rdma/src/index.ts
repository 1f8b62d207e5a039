import { definePlugin, PLUGIN_API_VERSION, type ProbeResult, type Transport, type TransportContext } from '@te/connector';
import { FabricTransport, nativeOptions, probeFabricFromEnv, requireLibfabric } from '@te/fabric';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { ENV_PREFIX, rdmaOptions, type RdmaOptions } from './options.js';

export { rdmaOptions, type RdmaOptions } from './options.js';

export const VERSION = '0.1.0';

function probe(): ProbeResult {
  return probeFabricFromEnv(loadBinding, PLUGIN_NAME, ENV_PREFIX);
}

/** Creates a mooncake-rdma transport; PROVIDER_UNAVAILABLE names what was found and what to install. */
export async function createRdmaTransport(context: TransportContext, options: RdmaOptions): Promise<Transport> {
  const native = loadBinding();
  requireLibfabric(native, PLUGIN_NAME);
  return new FabricTransport(native, context, nativeOptions(PLUGIN_NAME, context, options, ENV_PREFIX));
}

/** mooncake-rdma: one-sided RDMA READ/WRITE over libfabric RDM endpoints. */
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
  },
  options: rdmaOptions,
  probe,
  create: createRdmaTransport,
});
