/**
 * The native surface of mooncake-nvlink: the shared CUDA transport surface (declared in
 * @te/cuda) plus the fabric-memory allocator. The one place that
 * loads the addon.
 */
import { fileURLToPath } from 'node:url';
import { addonLoader, type NativeCudaModule } from '@te/cuda';

export const PLUGIN_NAME = 'mooncake-nvlink';

export type HandleType = 'fabric' | 'posix-fd';

export interface NativeAllocation {
  addr: bigint;
  /** Rounded up to the allocation granularity. */
  size: bigint;
  id: bigint;
  device: number;
}

export interface NativeAllocator {
  /** cuMemCreate + reserve + map + access; throws TransferError (NO_DEVICE, OUT_OF_MEMORY, UNSUPPORTED_OPERATION...). */
  allocate(device: number, bytes: bigint, handleType: HandleType): NativeAllocation;
  /** Unmaps and releases; refused while registered or for unknown addresses. */
  free(addr: bigint): void;
  /** The allocation holding [addr, addr+length), or null. */
  find(addr: bigint, length: bigint): { addr: bigint; size: bigint; device: number; handleType: HandleType } | null;
  count(): number;
}

export interface NativeNvlinkModule extends NativeCudaModule {
  allocator: NativeAllocator;
  /** The abstract unix socket serving posix-fd handles ('' while no posix-fd transport exists). */
  fdServerName(): string;
}

/** The package root (src/ and dist/ are both one level below it). */
export function packageRoot(): string {
  return fileURLToPath(new URL('..', import.meta.url));
}

export const loadBinding: () => NativeNvlinkModule = addonLoader<NativeNvlinkModule>({
  plugin: PLUGIN_NAME,
  pkg: '@te/mooncake-nvlink',
  addon: 'te_mooncake_nvlink.node',
  envVar: 'TE_MOONCAKE_NVLINK_ADDON',
  root: packageRoot(),
});
