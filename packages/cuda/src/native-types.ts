/**
 * The native surface both CUDA addons export (declarations only; see
 * native/cuda/include/te/cuda/napi_transport.h). Arguments are validated in TypeScript
 * before they get here.
 */
import type { NativeCallbacks } from '@te/connector';

/** What registration exported for one region; becomes the buffer's attrs in the descriptor. */
export interface NativeExport {
  /** Start of the allocation holding the region (this process's address). */
  base: bigint;
  size: bigint;
  device: number;
  /** CUDA IPC handle or fabric handle (64 bytes); empty for posix-fd handles. */
  handle: Uint8Array;
  /** posix-fd: the id under which the exporter serves the allocation's fd; else 0n. */
  allocId: bigint;
}

export interface NativePeerAlloc {
  base: bigint;
  size: bigint;
  device: number;
  handle: Uint8Array;
  allocId: bigint;
}

export interface NativePeerInfo {
  name: string;
  epoch: bigint;
  /** Same process: remote addresses are this process's own registered memory. */
  local: boolean;
  /** Backend endpoint (mooncake-nvlink posix-fd: the exporter's unix socket name); '' otherwise. */
  socket: string;
  allocs: NativePeerAlloc[];
  /** Remote-accessible buffers the peer published, each inside allocs[alloc]. */
  buffers: { addr: bigint; length: bigint; alloc: number }[];
}

export interface NativeCudaTransport {
  /** Validates and exports [addr, addr+length) of cuda:`device`. Throws TransferError (NO_DEVICE, MEMORY_KIND_UNSUPPORTED, MEMORY_OVERLAP...). */
  registerMemory(addr: bigint, length: bigint, device: number, remoteAccess: boolean): NativeExport;
  /** Resolves once no batch uses the region any more. */
  unregisterMemory(addr: bigint): Promise<void>;
  /** Records a peer's published allocations; handles are opened lazily, once per allocation. */
  openPeer(info: NativePeerInfo): number;
  closePeer(peerId: number): void;
  /** Queues a batch (one call per batch) and returns its id; `onBatch(id, ...)` reports. */
  submit(peerId: number, opcodes: Uint8Array, localAddrs: BigUint64Array, remoteAddrs: BigUint64Array, lengths: BigUint64Array): number;
  /** Fails a batch with `status`; issued copies are awaited first (a DMA cannot be recalled). */
  cancel(batchId: number, status: number): void;
  /** Peer allocations currently opened (IPC handles / VMM mappings), for tests. */
  importsOpen(): number;
  /** Fails pending batches with ABORTED, joins the copy thread, closes imports. Idempotent. */
  /** Stops the copy thread on a worker thread (copies in flight are awaited there). */
  close(): Promise<void>;
}

export interface NativeDevice {
  ordinal: number;
  name: string;
  pciBusId: string;
  totalMemory: bigint;
  computeCapability: string;
  vmm: boolean;
  fabric: boolean;
  posixFd: boolean;
}

export interface NativeProbe {
  builtWithCuda: boolean;
  toolkitVersion: string;
  runtimeVersion: number;
  driverVersion: number;
  libcudaLoaded: boolean;
  /** '' when a device is usable; else "no CUDA device: <call> failed: <CUDA error> ...". */
  reason: string;
  devices: NativeDevice[];
}

/** Synchronous cudaMalloc / cudaMemcpy helpers (tests, benchmarks, small tools). */
export interface NativeDeviceMemory {
  alloc(device: number, bytes: bigint): bigint;
  free(device: number, addr: bigint): void;
  copyToDevice(device: number, dst: bigint, source: ArrayBufferView): void;
  copyToHost(device: number, destination: ArrayBufferView, src: bigint): void;
  memset(device: number, dst: bigint, value: number, bytes: bigint): void;
  /** Seconds per same-process cudaMemcpyAsync device-to-device copy (CUDA events). */
  baselineCopy(device: number, dst: bigint, src: bigint, bytes: bigint, iterations: number): number;
}

/** CUDA events settled off the JS thread (native/cuda/include/te/cuda/napi_events.h). */
export interface NativeCudaEvents {
  /** Records an event on `stream` of cuda:`device` now; settles once the GPU has passed it. */
  record(device: number, stream: bigint): Promise<void>;
  pending(): number;
}

export interface NativeCudaModule {
  CudaTransport: new (
    options: { streamsPerDevice: number; sliceBytes: number; [backendOption: string]: string | number },
    callbacks: Pick<NativeCallbacks, 'onBatch'>,
  ) => NativeCudaTransport;
  probe(): NativeProbe;
  setErrorFactory(factory: (status: number, message: string) => Error): void;
  statusName(status: number): string;
  deviceMemory: NativeDeviceMemory;
  events: NativeCudaEvents;
  builtWithCuda: boolean;
  backend: string;
}
