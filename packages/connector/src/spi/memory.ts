/** Where a byte lives. `cuda` memory is device memory of one GPU. */
export type MemoryKind = 'cpu' | 'cuda';

/** A device name as users write it: `cpu`, or `cuda:N` for GPU N. */
export type DeviceName = 'cpu' | `cuda:${number}`;

/** JS memory that can be registered directly; its registration keeps it alive. */
export type BufferSource = ArrayBuffer | SharedArrayBuffer | ArrayBufferView;

/** A normalised registration request, handed to every transport of the engine. */
export interface RegisterRequest {
  /** Backing JS memory; absent for raw addresses (GPU pointers, memory owned by another library). */
  buffer?: BufferSource;
  /**
   * The region's address. Without `buffer`: the raw start address to register. With
   * `buffer`: absent for the first transport that registers it, which chooses the address
   * (a native one returns the buffer's pointer, a JS one a stable synthetic address); present
   * for every later transport of the engine, which must register the buffer under exactly
   * this address (`HostAddressSpace` does it for JS transports). A different address is
   * refused (INTERNAL).
   */
  addr?: bigint;
  length: bigint;
  device: DeviceName;
  /** Whether peers may read and write it. Local-only memory is a source/destination for this process alone. */
  remoteAccess: boolean;
}

/** Memory handed out by a transport's allocator (a pre-registered pool, fabric GPU memory). */
export interface AllocatedMemory {
  addr: bigint;
  length: bigint;
  /** A JS view of it, when it is host memory. */
  buffer?: Uint8Array;
}

/** What a transport reports back for one registration. */
export interface TransportRegistration {
  addr: bigint;
  length: bigint;
  /** Per-transport attributes published to peers in the segment descriptor (keys, IPC handles). */
  attrs?: WireValue;
}

/** A value that crosses the control plane (msgpack): u64 values are always bigint, never Number. */
export type WireValue =
  null | boolean | number | bigint | string | Uint8Array | Uint32Array | Int32Array | BigUint64Array | WireValue[] | { [key: string]: WireValue };

export function memoryKindOf(device: DeviceName): MemoryKind {
  return device === 'cpu' ? 'cpu' : 'cuda';
}

const DEVICE_PATTERN = /^(cpu|cuda:(0|[1-9][0-9]{0,3}))$/;

export function isDeviceName(value: unknown): value is DeviceName {
  return typeof value === 'string' && DEVICE_PATTERN.test(value);
}
