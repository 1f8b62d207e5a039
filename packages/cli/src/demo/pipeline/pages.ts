/** A page allocator over `count` pages, handing out scattered pages as a paged KV cache does. */
export class PageAllocator {
  private readonly free: number[];

  constructor(readonly count: number) {
    // Interleaved order: consecutive requests get non-contiguous pages.
    this.free = Array.from({ length: count }, (_, i) => (i * 7) % count);
  }

  allocate(n: number): Uint32Array {
    if (n > this.free.length) throw Object.assign(new Error(`out of KV pages: ${n} needed, ${this.free.length} free`), { code: 'POOL_EXHAUSTED' });
    return Uint32Array.from(this.free.splice(0, n));
  }

  release(pages: Uint32Array): void {
    this.free.push(...pages);
  }
}

/** A bump allocator with whole-request release, for encoder-cache memory. */
export class RegionAllocator {
  private used = new Map<string, { offset: number; length: number }>();

  constructor(readonly size: number) {}

  allocate(key: string, length: number): number {
    const taken = [...this.used.values()].sort((a, b) => a.offset - b.offset);
    let offset = 0;
    for (const t of taken) {
      if (t.offset - offset >= length) break;
      offset = Math.max(offset, t.offset + t.length);
    }
    if (offset + length > this.size) throw Object.assign(new Error(`encoder cache full (${length} bytes wanted)`), { code: 'POOL_EXHAUSTED' });
    this.used.set(key, { offset, length });
    return offset;
  }

  release(key: string): void {
    this.used.delete(key);
  }
}
