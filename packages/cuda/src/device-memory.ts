import { TransferError } from '@te/connector';
import type { NativeCudaModule } from './native-types.js';

/**
 * Plain cudaMalloc memory and host<->device copies, for tests, benchmarks and tools that
 * have no other CUDA library in Node. Synchronous (they block the calling thread while
 * the GPU works): not for a serving hot path.
 */
export interface DeviceMemory {
  /** cudaMalloc of `bytes` on cuda:`device`; the address as bigint. */
  alloc(bytes: bigint | number, device?: number): bigint;
  free(addr: bigint, device?: number): void;
  /** cudaMemcpy host → device. */
  write(addr: bigint, data: ArrayBufferView, device?: number): void;
  /** cudaMemcpy device → host, into `into` (or a new buffer of `length`). */
  read(addr: bigint, length: number, device?: number, into?: Uint8Array): Uint8Array;
  fill(addr: bigint, value: number, bytes: bigint | number, device?: number): void;
  /** Seconds per same-process device-to-device cudaMemcpy of `bytes` (the bandwidth baseline). */
  baselineCopy(dst: bigint, src: bigint, bytes: bigint | number, iterations?: number, device?: number): number;
}

/** The DeviceMemory of an addon that links te_cuda (te/cuda/napi_device.h exports `deviceMemory`). */
export function deviceMemoryOf(load: () => Pick<NativeCudaModule, 'deviceMemory'>, plugin: string): DeviceMemory {
  const dev = (d: number | undefined) => {
    const v = d ?? 0;
    if (!Number.isInteger(v) || v < 0) throw new TransferError('INVALID_ARGUMENT', `Expected \`device\` to be a GPU ordinal, got ${String(d)}`, { plugin });
    return v;
  };
  const big = (v: bigint | number, what: string) => {
    if (typeof v === 'bigint' && v >= 0n) return v;
    if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
    throw new TransferError('INVALID_ARGUMENT', `Expected \`${what}\` to be a non-negative integer`, { plugin });
  };
  return {
    alloc: (bytes, device) => load().deviceMemory.alloc(dev(device), big(bytes, 'bytes')),
    free: (addr, device) => load().deviceMemory.free(dev(device), addr),
    write: (addr, data, device) => load().deviceMemory.copyToDevice(dev(device), addr, data),
    read: (addr, length, device, into) => {
      const out = into ?? new Uint8Array(length);
      load().deviceMemory.copyToHost(dev(device), out.subarray(0, length), addr);
      return out;
    },
    fill: (addr, value, bytes, device) => load().deviceMemory.memset(dev(device), addr, value & 0xff, big(bytes, 'bytes')),
    baselineCopy: (dst, src, bytes, iterations = 10, device) => load().deviceMemory.baselineCopy(dev(device), dst, src, big(bytes, 'bytes'), iterations),
  };
}
