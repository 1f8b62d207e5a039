/** Loads the barex addon: the libfabric layer's surface (@te/fabric's native-types) plus its pool. */
import { fileURLToPath } from 'node:url';
import { loadFabricAddon, type NativeFabricModule, type NativeFabricOptions } from '@te/fabric';

export const PLUGIN_NAME = 'barex';

/** What barex's addon adds to the transport's options (read by its options hook). */
export interface BarexNativeOptions extends NativeFabricOptions {
  /** Bytes of the process pool, created by the first transport (0 = none). */
  poolSize: number;
  /** Refuse registrations outside the pool. */
  poolStrict: boolean;
}

/** The barex addon: the libfabric layer's exports plus the process pool's. */
export interface BarexModule extends NativeFabricModule {
  /** Allocates from the process pool; POOL_EXHAUSTED when no free range fits. */
  poolAlloc(bytes: bigint): bigint;
  /** Returns an allocation (by its start) to the pool. */
  poolFree(addr: bigint): void;
  /** Zeros before the pool exists. */
  poolStats(): { base: bigint; size: bigint; used: bigint; allocations: number };
  /** The process pool as one ArrayBuffer (null before a pool exists). */
  poolBuffer(): ArrayBuffer | null;
  /** Path of the vendor library accl-barex found at build time, '' when absent. */
  vendorLibrary: string;
}

let cached: BarexModule | undefined;

export function loadBinding(): BarexModule {
  cached ??= loadFabricAddon({
    plugin: PLUGIN_NAME,
    addon: 'te_barex.node',
    envOverride: 'TE_BAREX_ADDON',
    packageRoot: fileURLToPath(new URL('..', import.meta.url)),
    workspace: '@te/barex',
  }) as BarexModule;
  return cached;
}
