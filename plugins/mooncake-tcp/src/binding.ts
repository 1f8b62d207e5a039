/**
 * The native surface of mooncake-tcp: the one place that declares what the addon exports
 * and loads it. Arguments are validated in TypeScript before they get here.
 */
import { fileURLToPath } from 'node:url';
import { loadNativeAddon, type NativeAddonModule, type NativeCallbacks, type NativeTransportHandle } from '@te/connector';
import type { NativeDeviceMemory, NativeProbe } from '@te/cuda';

export const PLUGIN_NAME = 'mooncake-tcp';

/** Options of one native transport (all validated and defaulted by src/options.ts). */
export interface NativeTransportOptions {
  segmentName: string;
  epoch: bigint;
  bindAddress: string;
  port: number;
  ioThreads: number;
  lanesPerPeer: number;
  connectTimeoutMs: number;
  sliceSize: number;
  socketBufferBytes: number;
  /** TCP_CONGESTION of the data sockets; absent: the system's default. */
  congestionControl?: string;
  windowBytes: number;
  cancelGraceMs: number;
  notifyQueuePerPeer: number;
  notifyQueueBytes: number;
  maxConnections: number;
  maxConnectionsPerAddress: number;
  handshakeTimeoutMs: number;
  idleTimeoutMs: number;
  busyPollUs: number;
  batchScheduling: boolean;
  coalesceWrites: boolean;
  /** Shared secret bytes; absent: no authentication. */
  authSecret?: Uint8Array;
}

export interface NativeTcpTransport extends NativeTransportHandle {
  /** The bound data port (the ephemeral one when options.port was 0). */
  port(): number;
  /** Bytes of gathered writes with narrow rows (under 4 KiB) packed before their send, so far. */
  rowsPacked(): bigint;
  /**
   * Registers [addr, addr+length) (inside `buffer` when given; `addr` 0n = its start) and
   * returns the start address. A buffer is kept alive until unregistered. `device` N >= 0
   * registers raw device memory of cuda:N (checked with cuPointerGetAttribute and
   * cuMemGetAddressRange; staged through pinned host buffers on the data path); -1 or
   * absent: host memory. Throws TransferError MEMORY_OVERLAP / ADDRESS_OUT_OF_RANGE /
   * INVALID_ARGUMENT, NO_DEVICE (no usable GPU: the failing CUDA call and error),
   * MEMORY_KIND_UNSUPPORTED (built without CUDA, or not device memory).
   */
  registerMemory(
    buffer: ArrayBuffer | SharedArrayBuffer | ArrayBufferView | null,
    addr: bigint,
    length: bigint,
    remoteAccess: boolean,
    device?: number,
  ): bigint;
  /** Starts connecting to a peer (or marks it same-process); `onOpen(peerId, ...)` reports. */
  openPeer(host: string, port: number, epoch: bigint, name: string, local: boolean): number;
}

export interface NativeModule extends NativeAddonModule {
  TcpTransport: new (options: NativeTransportOptions, callbacks: NativeCallbacks) => NativeTcpTransport;
  /** The addon's per-process random epoch. */
  processEpoch(): bigint;
  /** Wire protocol version spoken by this build. */
  protocolVersion: number;
  /** Whether the addon was built with the CUDA toolkit (device memory staged through pinned buffers). */
  builtWithCuda: boolean;
  /** The CUDA layer's probe and device tools (te/cuda/napi_device.h), as @te/cuda declares them. */
  probeCuda(): NativeProbe;
  deviceMemory: NativeDeviceMemory;
}

const ADDON = 'te_mooncake_tcp.node';
let cached: NativeModule | undefined;

/** The package root (src/ and dist/ are both one level below it). */
export function packageRoot(): string {
  return fileURLToPath(new URL('..', import.meta.url));
}

/** Loads the addon once. A failure lists the paths tried and how to fix it. */
export function loadBinding(): NativeModule {
  cached ??= loadNativeAddon<NativeModule>({
    plugin: PLUGIN_NAME,
    file: ADDON,
    packageRoot: packageRoot(),
    envVar: 'TE_MOONCAKE_TCP_ADDON',
    solutions: ['build it: `npm run build:native -w @te/mooncake-tcp` (needs cmake >= 3.18 and g++; Debian: apt-get install -y cmake g++)'],
  });
  return cached;
}
