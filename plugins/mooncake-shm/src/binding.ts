/**
 * The native surface of mooncake-shm: the one place that declares what the addon exports
 * and loads it. Arguments are validated in TypeScript before they get here.
 */
import { fileURLToPath } from 'node:url';
import { loadNativeAddon, type NativeAddonModule, type NativeCallbacks, type NativeTransportHandle } from '@te/connector';

export const PLUGIN_NAME = 'mooncake-shm';

/** Options of one native transport (validated and defaulted by src/options.ts). */
export interface NativeTransportOptions {
  segmentName: string;
  epoch: bigint;
  /** Abstract unix socket name to listen on (no leading NUL); '' listens nowhere (transport disabled). */
  socketName: string;
  copyThreads: number;
  chunkBytes: number;
  maxOutstanding: number;
  maxConnections: number;
  handshakeTimeoutMs: number;
  connectTimeoutMs: number;
  cancelGraceMs: number;
  notifyQueuePerPeer: number;
  notifyQueueBytes: number;
  batchScheduling: boolean;
}

export interface NativeShmTransport extends NativeTransportHandle {
  /**
   * Registers [addr, addr+length) (inside `buffer` when given; `addr` 0n = its start); the
   * buffer is kept alive until unregistered. With `hugePages` the kernel is asked to back
   * the whole 2 MiB pages inside it with huge pages. Throws TransferError MEMORY_OVERLAP /
   * ADDRESS_OUT_OF_RANGE / INVALID_ARGUMENT.
   */
  registerMemory(
    buffer: ArrayBuffer | ArrayBufferView | null,
    addr: bigint,
    length: bigint,
    remoteAccess: boolean,
    hugePages: boolean,
  ): { addr: bigint; hugePages: string };
  /**
   * Pool memory: a sealed memfd mapped shared, which targets map and copy with memcpy. With
   * `view`, an ArrayBuffer over it, which holds the mapping (it stays valid after freeMemory
   * until collected); pass false for a length no ArrayBuffer of this Node.js can have.
   * Throws TransferError OUT_OF_MEMORY.
   */
  allocateMemory(length: bigint, view: boolean): { addr: bigint; buffer?: ArrayBuffer };
  /** Frees pool memory (unregister it first): INVALID_ARGUMENT when no pool starts there or it is still registered. */
  freeMemory(addr: bigint): void;
  /** As a target: chunks copied through mapped pools and with process_vm_*, and the pools mapped now. */
  copyStats(): { poolChunks: number; processVmChunks: number; poolsMapped: number; completionMessages: number };
  /** Starts the handshake with the target listening on `socketName`; `onOpen(peerId, ...)` reports. */
  openPeer(socketName: string, epoch: bigint, name: string): number;
}

export interface NativeModule extends NativeAddonModule {
  ShmTransport: new (options: NativeTransportOptions, callbacks: NativeCallbacks) => NativeShmTransport;
  /** Wire protocol version spoken by this build. */
  protocolVersion: number;
}

let cached: NativeModule | undefined;

/** The package root (src/ and dist/ are both one level below it). */
export function packageRoot(): string {
  return fileURLToPath(new URL('..', import.meta.url));
}

/** Loads the addon once. A failure lists the paths tried and how to fix it. */
export function loadBinding(): NativeModule {
  cached ??= loadNativeAddon<NativeModule>({
    plugin: PLUGIN_NAME,
    file: 'te_mooncake_shm.node',
    packageRoot: packageRoot(),
    envVar: 'TE_MOONCAKE_SHM_ADDON',
    solutions: ['build it: `npm run build:native -w @te/mooncake-shm` (needs cmake >= 3.18 and g++; Debian: apt-get install -y cmake g++)'],
  });
  return cached;
}
