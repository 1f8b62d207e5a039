import { TransferError } from '@te/connector';

/** Allocations are rounded to this, so items start cache-line aligned. */
const ALIGN = 64;

export interface PoolItem {
  readonly key: string;
  readonly offset: number;
  readonly length: number;
  /** Transfers reading the item now: it cannot be evicted while > 0. */
  pins: number;
}

/**
 * A bounded first-fit allocator over one region, with eviction of the least recently used
 * unpinned items when nothing fits. Every `allocate` ends after at most one eviction per item:
 * it never loops, and never evicts an item a transfer is reading.
 *
 * First-fit with coalescing rather than a ring: items of very different sizes (an image
 * and a long video) share the pool, and a pinned item in the middle of a ring would block
 * every write behind it, while here it only blocks its own range.
 */
export class PoolAllocator {
  /** Free ranges, sorted by offset, never adjacent (coalesced). */
  private readonly free: { offset: number; length: number }[];
  /** Items in order of last use (allocation or `touch`): the first is the least recently used. */
  private readonly items = new Map<string, PoolItem>();

  constructor(
    readonly size: number,
    private readonly onEvict: (item: PoolItem) => void = () => undefined,
  ) {
    if (!Number.isInteger(size) || size < ALIGN)
      throw new TransferError('INVALID_ARGUMENT', `Expected the pool size to be an integer of at least ${ALIGN} bytes, got ${size}`);
    this.free = [{ offset: 0, length: size }];
  }

  get(key: string): PoolItem | undefined {
    return this.items.get(key);
  }

  /** Marks an item used now (saved again, or handed to a consumer): it is evicted after older ones. */
  touch(key: string): void {
    const item = this.items.get(key);
    if (!item) return;
    this.items.delete(key);
    this.items.set(key, item);
  }

  get count(): number {
    return this.items.size;
  }

  /** Bytes not allocated to items. */
  get freeBytes(): number {
    return this.free.reduce((a, f) => a + f.length, 0);
  }

  allocate(key: string, length: number): PoolItem {
    if (this.items.has(key)) throw new TransferError('INVALID_ARGUMENT', `pool item ${key} already exists`);
    if (!Number.isInteger(length) || length <= 0) throw new TransferError('INVALID_ARGUMENT', `Expected an item length > 0, got ${length}`);
    const need = Math.ceil(length / ALIGN) * ALIGN;
    if (need > this.size) throw new TransferError('INVALID_ARGUMENT', `item ${key} of ${length} bytes is larger than the transfer pool (${this.size} bytes)`);
    for (let evictions = 0; ; evictions++) {
      const i = this.free.findIndex((f) => f.length >= need);
      if (i >= 0) {
        const f = this.free[i]!;
        const item: PoolItem = { key, offset: f.offset, length, pins: 0 };
        if (f.length === need) this.free.splice(i, 1);
        else this.free[i] = { offset: f.offset + need, length: f.length - need };
        this.items.set(key, item);
        return item;
      }
      const victim = [...this.items.values()].find((it) => it.pins === 0);
      if (!victim || evictions > this.items.size) {
        const pinned = [...this.items.values()].filter((x) => x.pins > 0).length;
        throw new TransferError(
          'POOL_EXHAUSTED',
          `transfer pool full: no room for ${key} (${length} bytes); ${pinned} of ${this.items.size} items are being read and cannot be evicted, ${this.freeBytes} bytes free in fragments`,
        );
      }
      this.release(victim);
      this.onEvict(victim);
    }
  }

  /** Frees an item now (it must not be pinned). */
  delete(key: string): boolean {
    const item = this.items.get(key);
    if (!item) return false;
    if (item.pins > 0) throw new TransferError('INVALID_ARGUMENT', `pool item ${key} is being read and cannot be freed`);
    this.release(item);
    return true;
  }

  private release(item: PoolItem): void {
    this.items.delete(item.key);
    const range = { offset: item.offset, length: Math.ceil(item.length / ALIGN) * ALIGN };
    let i = this.free.findIndex((f) => f.offset > range.offset);
    if (i < 0) i = this.free.length;
    this.free.splice(i, 0, range);
    // Coalesce with the neighbours.
    if (i + 1 < this.free.length && this.free[i]!.offset + this.free[i]!.length === this.free[i + 1]!.offset) {
      this.free[i]!.length += this.free[i + 1]!.length;
      this.free.splice(i + 1, 1);
    }
    if (i > 0 && this.free[i - 1]!.offset + this.free[i - 1]!.length === this.free[i]!.offset) {
      this.free[i - 1]!.length += this.free[i]!.length;
      this.free.splice(i, 1);
    }
  }
}
