/**
 * The native surface of mooncake-tcp: the one place that declares what the addon exports
 * and loads it. Arguments are validated in TypeScript before they get here.
 */
import { fileURLToPath } from 'node:url';
import { loadNativeAddon, type NativeCallbacks } from '@te/connector';
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
  windowBytes: number;
  cancelGraceMs: number;
  notifyQueuePerPeer: number;
  notifyQueueBytes: number;
  maxConnections: number;
  maxConnectionsPerAddress: number;
  handshakeTimeoutMs: number;
  idleTimeoutMs: number;
  busyPollUs: number;
  /** Shared secret bytes; absent: no authentication. */
  authSecret?: Uint8Array;
}

export interface NativeTcpTransport {
  /** The bound data port (the ephemeral one when options.port was 0). */
  port(): number;
  /**
   * Registers [addr, addr+length) (inside `buffer` when given; `addr` 0n = its start) and
   * returns the start address. A buffer is kept alive until unregistered. `device` N >= 0
   * registers raw device memory of cuda:N (checked with cuPointerGetAttribute and
   * cuMemGetAddressRange; staged through pinned host buffers on the data path); -1 or
   * absent: host memory. Throws TransferError MEMORY_OVERLAP / ADDRESS_OUT_OF_RANGE /
   * INVALID_ARGUMENT, NO_DEVICE (no usable GPU: the failing CUDA call and error),
   * MEMORY_KIND_UNSUPPORTED (built without CUDA, or not device memory).
   */
  registerMemory(buffer: ArrayBuffer | SharedArrayBuffer | ArrayBufferView | null, addr: bigint, length: bigint, remoteAccess: boolean, device?: number): bigint;
  /** Unregisters and resolves once no access to that memory is in flight. */
  unregisterMemory(addr: bigint): Promise<void>;
  /** Starts connecting to a peer (or marks it same-process); `onOpen(peerId, ...)` reports. */
  openPeer(host: string, port: number, epoch: bigint, name: string, local: boolean): number;
  closePeer(peerId: number): void;
  /**
   * Starts a batch (one call for the whole struct-of-arrays batch) and returns its id;
   * `onBatch(id, ...)` reports. Throws TransferError for PEER_NOT_FOUND / INVALID_ARGUMENT.
   */
  submit(peerId: number, opcodes: Uint8Array, localAddrs: BigUint64Array, remoteAddrs: BigUint64Array, lengths: BigUint64Array, notify: Uint8Array | null): number;
  /** Stops a batch with `status`: unsent slices fail, in-flight ones are awaited (bounded by cancelGraceMs). */
  cancel(batchId: number, status: number): void;
  /** Closes listeners and connections, joins I/O threads, fails pending batches with ABORTED. Idempotent. */
  /** Stops the transport on a worker thread (joins the I/O threads). */
  close(): Promise<void>;
}

export interface NativeModule {
  TcpTransport: new (options: NativeTransportOptions, callbacks: NativeCallbacks) => NativeTcpTransport;
  /** Native code throws whatever this factory returns (a TransferError). */
  setErrorFactory(factory: (status: number, message: string) => Error): void;
  /** The code name of a native status ("ADDRESS_OUT_OF_RANGE", ...). */
  statusName(status: number): string;
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
