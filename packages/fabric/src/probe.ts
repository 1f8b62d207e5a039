import { parseOptions, type ProbeResult } from '@te/connector';
import { mrModeNames } from './fabric-transport.js';
import { builtWithoutLibfabric } from './load-addon.js';
import type { NativeFabricModule } from './native-types.js';
import { fabricOptionsSchema, type FabricOptions } from './options.js';

/**
 * probe() for a libfabric plugin whose options come from the environment under `envPrefix`:
 * read through the plugin's own schema, so the probe sees what a transport created in the
 * same environment would use (`TE_RDMA_ALLOW_SHM=true` included, which a comparison with
 * "1" missed, and the NIC limit and source address, which it did not read at all). A
 * variable the schema refuses makes the plugin unavailable, with the schema's reason.
 */
export function probeFabricFromEnv(
  load: () => NativeFabricModule,
  plugin: string,
  envPrefix: string,
  extra: Record<string, unknown> = {},
  env: NodeJS.ProcessEnv = process.env,
): ProbeResult {
  let o: FabricOptions;
  try {
    o = parseOptions(fabricOptionsSchema(envPrefix), {}, env, plugin) as FabricOptions;
  } catch (e) {
    return { available: false, reason: (e as Error).message, details: extra };
  }
  const chosen: Partial<FabricOptions> & { envPrefix: string } = { nics: o.nics, allowShm: o.allowShm, maxRails: o.maxRails, envPrefix };
  if (o.provider !== undefined) chosen.provider = o.provider;
  if (o.sourceAddress !== undefined) chosen.sourceAddress = o.sourceAddress;
  return probeFabric(load, plugin, chosen, extra);
}

/** probe() for a libfabric plugin: what was found, what would be chosen, what to install. */
export function probeFabric(
  load: () => NativeFabricModule,
  plugin: string,
  options: Partial<FabricOptions> & { envPrefix?: string },
  extra: Record<string, unknown> = {},
): ProbeResult {
  let native: NativeFabricModule;
  try {
    native = load();
  } catch (e) {
    return { available: false, reason: (e as Error).message, details: extra };
  }
  if (!native.builtWithLibfabric) {
    return {
      available: false,
      reason: builtWithoutLibfabric(plugin),
      details: { builtWithLibfabric: false, ...extra },
    };
  }
  const d = native.discover({
    plugin,
    envPrefix: options.envPrefix ?? '',
    provider: options.provider ?? '',
    nics: options.nics ?? [],
    allowShm: options.allowShm ?? false,
    sourceAddress: options.sourceAddress ?? '',
    maxRails: options.maxRails ?? 4,
  });
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
