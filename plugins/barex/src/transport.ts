import { constants as bufferConstants } from 'node:buffer';
import {
  TransferError,
  type AllocatedMemory,
  type DeviceName,
  type SegmentDescriptor,
  type TransportContext,
  type TransportPeer,
  type WireValue,
} from '@te/connector';
import { FabricTransport, nativeOptions, type SegmentHealth } from '@te/fabric';
import { PLUGIN_NAME, type BarexModule, type BarexNativeOptions } from './binding.js';
import { ENV_PREFIX, type BarexOptions } from './options.js';

/** Memory handed out by the pool. `buffer` is a view of exactly that memory. */
export interface PoolAllocation {
  addr: bigint;
  length: number;
  buffer: Uint8Array;
}

export interface PoolStats {
  base: bigint;
  size: bigint;
  used: bigint;
  allocations: number;
}

const live = new Set<BarexTransport>();

/**
 * barex: the libfabric transport with one pre-registered pool. Registrations must lie in
 * the pool (unless allowExternalMemory); channels (one per rail) are opened eagerly at
 * openPeer and checked by checkSegment().
 */
export class BarexTransport extends FabricTransport {
  readonly #module: BarexModule;
  readonly #peers = new Map<string, TransportPeer>();
  readonly #strict: boolean;

  constructor(module: BarexModule, context: TransportContext, options: BarexOptions) {
    const native: BarexNativeOptions = {
      ...nativeOptions(PLUGIN_NAME, context, options, ENV_PREFIX),
      poolSize: options.poolSize,
      poolStrict: !options.allowExternalMemory,
    };
    super(module, context, native);
    this.#module = module;
    this.#strict = !options.allowExternalMemory;
    live.add(this);
  }

  /**
   * Allocates from the pool; POOL_EXHAUSTED when it cannot. The view needs the whole pool
   * in one ArrayBuffer: a pool longer than this Node.js makes one (`buffer.constants.MAX_LENGTH`,
   * 4 GiB on Node 20) is UNSUPPORTED_OPERATION here, and `engine.allocateMemory` serves it.
   */
  allocate(bytes: number | bigint): PoolAllocation {
    const size = this.#module.poolStats().size;
    if (size > BigInt(bufferConstants.MAX_LENGTH))
      throw this.fail(
        'UNSUPPORTED_OPERATION',
        `the barex pool (${size} bytes) is longer than the longest ArrayBuffer of this Node.js (${bufferConstants.MAX_LENGTH} bytes), so allocate() has no view to return: use engine.allocateMemory (registered by address, no view), a smaller poolSize, or Node.js 22 or later`,
      );
    const { addr, length } = this.#take(bytes);
    const pool = this.#module.poolBuffer();
    if (!pool) throw this.fail('INTERNAL', 'the barex pool has no buffer');
    return { addr, length, buffer: new Uint8Array(pool, Number(addr - this.#module.poolStats().base), length) };
  }

  #take(bytes: number | bigint): { addr: bigint; length: number } {
    this.checkOpen();
    if (typeof bytes === 'number' && !Number.isSafeInteger(bytes))
      throw this.fail('INVALID_ARGUMENT', `Expected \`bytes\` to be a positive integer, got ${String(bytes)}`);
    const n = typeof bytes === 'bigint' ? bytes : BigInt(bytes);
    if (n <= 0n || n > BigInt(Number.MAX_SAFE_INTEGER))
      throw this.fail('INVALID_ARGUMENT', `Expected \`bytes\` to be a positive integer, got ${String(bytes)}`);
    return { addr: this.#module.poolAlloc(n), length: Number(n) };
  }

  /**
   * The engine's allocator hook (`engine.allocateMemory`): pool memory, host only, with a
   * view when the pool has one (see `allocate`), else registered by address.
   */
  async allocateMemory(length: bigint, device: DeviceName): Promise<AllocatedMemory> {
    if (device !== 'cpu') throw this.fail('MEMORY_KIND_UNSUPPORTED', `the barex pool is host memory; cannot allocate ${device}`);
    if (this.#module.poolStats().size <= BigInt(bufferConstants.MAX_LENGTH)) {
      const a = this.allocate(length);
      return { addr: a.addr, length: BigInt(a.length), buffer: a.buffer };
    }
    const a = this.#take(length);
    return { addr: a.addr, length: BigInt(a.length) };
  }

  async freeMemory(addr: bigint): Promise<void> {
    this.free(addr);
  }

  /** Returns an allocation to the pool (unregister it first). */
  free(addr: bigint): void {
    this.checkOpen();
    if (this.native.isRegistered(addr))
      throw this.fail('INVALID_ARGUMENT', `memory at 0x${addr.toString(16)} is still registered: unregister it before freeing it`);
    this.#module.poolFree(addr);
  }

  poolStats(): PoolStats {
    return this.#module.poolStats();
  }

  override async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    const p = await super.openPeer(peer); // hello on every rail: the channels are open when this resolves
    this.#peers.set(peer.name, p);
    return p;
  }

  override async closePeer(peer: TransportPeer): Promise<void> {
    if (this.#peers.get(peer.segment) === peer) this.#peers.delete(peer.segment);
    await super.closePeer(peer);
  }

  /** The open peer handle of a segment, if any. */
  peerOf(segment: string): TransportPeer | undefined {
    return this.#peers.get(segment);
  }

  override describe(): Record<string, WireValue> {
    const s = this.#module.poolStats();
    return {
      ...super.describe(),
      model: 'BAREX memory pool over libfabric (accl-barex is not used)',
      vendorLibrary: this.#module.vendorLibrary || 'not found at build time',
      pool: { base: s.base, size: s.size, used: s.used, allocations: s.allocations, strict: this.#strict },
      openSegments: [...this.#peers.keys()],
    };
  }

  override async close(): Promise<void> {
    live.delete(this);
    this.#peers.clear();
    await super.close();
  }
}

function anyTransport(): BarexTransport {
  for (const t of live) return t;
  throw new TransferError(
    'PROVIDER_UNAVAILABLE',
    'no barex transport exists in this process: create an engine with connector "barex" before allocating from its pool',
    { plugin: PLUGIN_NAME },
  );
}

/** Allocates `bytes` from this process's barex pool (an engine with barex must exist). */
export function allocate(bytes: number | bigint): PoolAllocation {
  return anyTransport().allocate(bytes);
}

/** Frees a pool allocation by its address. */
export function free(addr: bigint): void {
  anyTransport().free(addr);
}

export function poolStats(): PoolStats {
  return anyTransport().poolStats();
}

/**
 * Segment-status check: pings every channel to `segment` (opened by an earlier transfer
 * or openSegment) and reports whether each answered in time.
 */
export async function checkSegment(segment: string, timeoutMs = 1000): Promise<SegmentHealth> {
  for (const t of live) {
    const p = t.peerOf(segment);
    if (p) return t.checkSegment(p, timeoutMs);
  }
  return { segment, healthy: false, rails: [], error: `no barex channel to segment "${segment}" is open in this process (transfer to it or open it first)` };
}
