import { constants as bufferConstants } from 'node:buffer';
import { TransferError, isTransferError, type AllocatedHandle, type DeviceName, type TransferEngine } from '@te/connector';
import { PoolAllocator, type PoolItem } from './pool-allocator.js';

/**
 * Registered memory the producer stores items in, keyed by content hash: allocated and
 * registered once through the engine (so every transport can read from it), bounded,
 * evicting the least recently used items no transfer is reading.
 */
export class TransferPool {
  private readonly allocator: PoolAllocator;
  private readonly meta = new Map<string, { dtype?: string; shape?: number[] }>();
  evictions = 0;

  private constructor(
    private readonly engine: TransferEngine,
    readonly memory: AllocatedHandle,
  ) {
    this.allocator = new PoolAllocator(Number(memory.length), (item) => {
      this.evictions++;
      this.meta.delete(item.key);
    });
  }

  static async create(engine: TransferEngine, bytes: number, device: DeviceName = 'cpu'): Promise<TransferPool> {
    if (!Number.isSafeInteger(bytes) || bytes < 64)
      throw new TransferError('INVALID_ARGUMENT', `Expected the EC transfer pool size to be a whole number of bytes from 64 to 2^53 - 1, got ${bytes}`);
    // Items are copied into host pool memory through a JS view, and no view is longer than
    // the longest buffer of this Node.js: refused before anything is allocated.
    if (device === 'cpu' && bytes > bufferConstants.MAX_LENGTH)
      throw new TransferError(
        'INVALID_ARGUMENT',
        `the EC transfer pool (${bytes} bytes of host memory) is longer than the longest buffer of Node.js ${process.version} (${bufferConstants.MAX_LENGTH} bytes), through which items are copied into it: use a pool of at most that size`,
      );
    let memory: AllocatedHandle;
    try {
      memory = await engine.allocateMemory(bytes, { device });
    } catch (e) {
      // Keep the engine's code (NO_DEVICE without a GPU, MEMORY_KIND_UNSUPPORTED without a
      // transport that allocates device memory), and say what was being allocated.
      if (!isTransferError(e)) throw e;
      throw new TransferError(e.code, `the EC transfer pool (${bytes} bytes on ${String(device)}) could not be allocated: ${e.message}`, { cause: e });
    }
    if (device === 'cpu' && !memory.buffer) {
      await engine.freeMemory(memory).catch(() => undefined);
      throw new TransferError('INTERNAL', 'the engine returned host pool memory without a view');
    }
    return new TransferPool(engine, memory);
  }

  get size(): number {
    return this.allocator.size;
  }

  get count(): number {
    return this.allocator.count;
  }

  has(key: string): boolean {
    return this.allocator.get(key) !== undefined;
  }

  /** Stores bytes under `key` (evicting as needed); an existing key is kept as is (same content, same hash). */
  store(key: string, bytes: ArrayBufferView, meta: { dtype?: string; shape?: number[] } = {}): PoolItem {
    const existing = this.allocator.get(key);
    if (existing) {
      this.allocator.touch(key);
      return existing;
    }
    const view = this.memory.buffer;
    if (!view)
      throw new TransferError(
        'MEMORY_KIND_UNSUPPORTED',
        `the transfer pool is on ${this.memory.device}: store device embeddings through a CUDA copy into pool memory`,
      );
    const item = this.allocator.allocate(key, bytes.byteLength);
    view.set(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength), item.offset);
    this.meta.set(key, meta);
    return item;
  }

  /** Marks an item used now: eviction takes least recently used items first. */
  touch(key: string): void {
    this.allocator.touch(key);
  }

  metaOf(key: string): { dtype?: string; shape?: number[] } | undefined {
    return this.meta.get(key);
  }

  /** Pins an item for a transfer: it cannot be evicted until `unpin`. */
  pin(key: string): PoolItem | undefined {
    const item = this.allocator.get(key);
    if (item) item.pins++;
    return item;
  }

  unpin(item: PoolItem): void {
    item.pins = Math.max(0, item.pins - 1);
  }

  addressOf(item: PoolItem): bigint {
    return this.memory.addr + BigInt(item.offset);
  }

  delete(key: string): boolean {
    this.meta.delete(key);
    return this.allocator.delete(key);
  }

  async close(): Promise<void> {
    await this.engine.freeMemory(this.memory).catch(() => undefined);
  }
}
