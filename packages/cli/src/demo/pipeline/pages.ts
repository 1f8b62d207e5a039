function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** A page allocator over `count` pages, handing out scattered pages as a paged KV cache does. */
export class PageAllocator {
  private readonly free: number[];

  constructor(readonly count: number) {
    // Interleaved order, so consecutive requests get non-contiguous pages: a stride
    // coprime with the page count visits every page exactly once.
    let stride = 7;
    while (gcd(stride, count) !== 1) stride += 2;
    this.free = Array.from({ length: count }, (_, i) => (i * stride) % count);
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
