import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { TransferError, type SegmentDescriptor, type WireValue } from '@te/connector';
import type { NativePeerAlloc, NativePeerInfo } from './native-types.js';

/** What a CUDA transport publishes as its endpoint. */
export interface CudaEndpoint {
  host: string;
  /** /proc/sys/kernel/random/boot_id: tells two machines with one hostname apart. */
  bootId: string;
  pid: number;
  backend: string;
  [key: string]: WireValue;
}

let bootIdCache: string | undefined;
export function bootId(): string {
  if (bootIdCache === undefined) {
    try {
      bootIdCache = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    } catch {
      bootIdCache = '';
    }
  }
  return bootIdCache;
}

export function localEndpoint(backend: string, extra: Record<string, WireValue> = {}): CudaEndpoint {
  return { host: hostname(), bootId: bootId(), pid: process.pid, backend, ...extra };
}

export function parseEndpoint(value: WireValue | undefined, plugin: string, peer: string): CudaEndpoint {
  const e = value as Partial<CudaEndpoint> | null | undefined;
  if (!e || typeof e !== 'object' || typeof e.host !== 'string' || typeof e.bootId !== 'string') {
    throw new TransferError('INVALID_ARGUMENT', `segment "${peer}" publishes no usable ${plugin} endpoint ({host, bootId, pid})`, { plugin });
  }
  return e as CudaEndpoint;
}

/** Whether an endpoint describes this machine (same boot id, or same host name when boot ids are unknown). */
export function sameMachine(e: CudaEndpoint): boolean {
  const mine = bootId();
  return mine !== '' && e.bootId !== '' ? e.bootId === mine : e.host === hostname();
}

function u64(v: unknown): bigint | undefined {
  if (typeof v === 'bigint' && v >= 0n) return v;
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  return undefined;
}

/** The per-buffer attrs both CUDA plugins publish. */
export interface CudaBufferAttrs {
  base: bigint;
  size: bigint;
  device: number;
  handle: Uint8Array;
  allocId: bigint;
}

export function parseAttrs(value: WireValue | undefined, plugin: string, peer: string, addr: bigint): CudaBufferAttrs {
  const a = value as Record<string, unknown> | null | undefined;
  const bad = (what: string) =>
    new TransferError('INVALID_ARGUMENT', `segment "${peer}" publishes malformed ${plugin} attrs for buffer 0x${addr.toString(16)}: ${what}`, { plugin });
  if (!a || typeof a !== 'object') throw bad('not an object');
  const base = u64(a.base);
  const size = u64(a.size);
  const device = typeof a.device === 'bigint' ? Number(a.device) : a.device;
  const allocId = a.allocId === undefined ? 0n : u64(a.allocId);
  if (base === undefined || size === undefined || size === 0n) throw bad('base/size must be u64 bigints');
  if (typeof device !== 'number' || !Number.isInteger(device) || device < 0) throw bad('device must be a GPU ordinal');
  if (!(a.handle instanceof Uint8Array)) throw bad('handle must be bytes');
  if (allocId === undefined) throw bad('allocId must be a u64 bigint');
  return { base, size, device, handle: a.handle, allocId };
}

/**
 * Builds what the native side needs from a peer's descriptor: its distinct allocations and
 * its remote-accessible CUDA buffers (bounds of every request are checked against these).
 * Buffers without this plugin's attrs (host memory, other transports) are left out.
 */
export function peerInfoOf(descriptor: SegmentDescriptor, plugin: string, local: boolean, socket: string): NativePeerInfo {
  const allocs: NativePeerAlloc[] = [];
  const index = new Map<string, number>();
  const buffers: NativePeerInfo['buffers'] = [];
  if (!local) {
    for (const b of descriptor.buffers) {
      if (b.device === 'cpu') continue;
      const raw = b.attrs?.[plugin];
      if (raw === undefined) continue;
      const a = parseAttrs(raw, plugin, descriptor.name, b.addr);
      if (b.addr < a.base || b.addr + b.length > a.base + a.size) {
        throw new TransferError(
          'INVALID_ARGUMENT',
          `segment "${descriptor.name}" publishes buffer 0x${b.addr.toString(16)}+${b.length} outside its allocation 0x${a.base.toString(16)}+${a.size}`,
          { plugin },
        );
      }
      const key = `${a.base}/${a.size}/${a.allocId}/${Buffer.from(a.handle).toString('hex')}`;
      let i = index.get(key);
      if (i === undefined) {
        i = allocs.length;
        index.set(key, i);
        allocs.push({ base: a.base, size: a.size, device: a.device, handle: a.handle, allocId: a.allocId });
      }
      buffers.push({ addr: b.addr, length: b.length, alloc: i });
    }
  }
  return { name: descriptor.name, epoch: descriptor.epoch, local, socket, allocs, buffers };
}
