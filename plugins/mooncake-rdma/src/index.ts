import { definePlugin, PLUGIN_API_VERSION, TransferError, type ProbeResult, type Transport, type TransportContext } from '@te/connector';
import { INSTALL_LIBFABRIC, loadBinding, PLUGIN_NAME } from './binding.js';
import { FabricTransport, mrModeNames, nativeOptions } from './fabric-transport.js';
import type { NativeFabricModule } from './native-types.js';
import { rdmaOptions, type FabricOptions, type RdmaOptions } from './options.js';

export { rdmaOptions, fabricOptionsSchema, type RdmaOptions, type FabricOptions } from './options.js';
export { FabricTransport, mrModeNames, nativeOptions, type FabricEndpoint, type SegmentHealth } from './fabric-transport.js';
export { loadFabricAddon, INSTALL_LIBFABRIC } from './binding.js';
export type * from './native-types.js';

export const VERSION = '0.1.0';

/** probe() for a libfabric plugin: what was found, what would be chosen, what to install. */
export function probeFabric(load: () => NativeFabricModule, plugin: string, options: Partial<FabricOptions>, extra: Record<string, unknown> = {}): ProbeResult {
  let native: NativeFabricModule;
  try {
    native = load();
  } catch (e) {
    return { available: false, reason: (e as Error).message, details: extra };
  }
  if (!native.builtWithLibfabric) {
    return {
      available: false,
      reason: `${plugin} was built without libfabric (libfabric-dev was missing at build time): ${INSTALL_LIBFABRIC}, then rebuild (npm rebuild, or npm run build:native -w @te/${plugin})`,
      details: { builtWithLibfabric: false, ...extra },
    };
  }
  const d = native.discover({ provider: options.provider ?? '', nics: options.nics ?? [], allowShm: options.allowShm ?? false, sourceAddress: options.sourceAddress ?? '', maxRails: options.maxRails ?? 4 });
  const details = {
    builtWithLibfabric: true,
    libfabric: d.version,
    fiProvider: process.env.FI_PROVIDER ?? null,
    providers: d.providers,
    rmaCandidates: d.rma.map((c) => `${c.provider} on ${c.domain} (mr_mode ${mrModeNames(c.mrMode).join('|') || '0'})${c.hardware ? ' [NIC]' : ''}`),
    chosen: d.chosen || null,
    rdmaHardware: d.rma.some((c) => c.hardware),
    ...extra,
  };
  if (!d.chosen) return { available: false, reason: d.message, details };
  return { available: true, details };
}

function probe(): ProbeResult {
  return probeFabric(loadBinding, PLUGIN_NAME, { provider: process.env.TE_RDMA_PROVIDER, allowShm: process.env.TE_RDMA_ALLOW_SHM === '1', nics: process.env.TE_RDMA_NICS?.split(',').filter(Boolean) ?? [] });
}

/** Creates a mooncake-rdma transport; PROVIDER_UNAVAILABLE names what was found and what to install. */
export async function createRdmaTransport(context: TransportContext, options: RdmaOptions): Promise<Transport> {
  const native = loadBinding();
  if (!native.builtWithLibfabric) {
    throw new TransferError('PROVIDER_UNAVAILABLE', `mooncake-rdma was built without libfabric (libfabric-dev was missing at build time): ${INSTALL_LIBFABRIC}, then rebuild (npm rebuild, or npm run build:native -w @te/mooncake-rdma)`, { plugin: PLUGIN_NAME });
  }
  return new FabricTransport(native, context, nativeOptions(PLUGIN_NAME, context, options));
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
