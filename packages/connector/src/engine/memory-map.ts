import { TransferError } from '../errors/transfer-error.js';
import { memoryKindOf, type BufferSource, type DeviceName, type MemoryKind } from '../spi/memory.js';

/** One registered region of this process. */
export interface LocalRegion {
  addr: bigint;
  length: bigint;
  device: DeviceName;
  remoteAccess: boolean;
  /** Kept so the JS buffer outlives its registration even if the caller drops it. */
  buffer?: BufferSource;
  /** Per-transport attributes to publish (keys, handles). */
  attrs: Record<string, unknown>;
}

/**
 * Registered regions sorted by start address: overlap checks on insert and
 * O(log n) lookup of the region holding a range.
 */
export class MemoryMap {
  private regions: LocalRegion[] = [];
  // Regions per memory kind, so routing knows "all cpu" without a scan per batch.
  private readonly kindCounts = new Map<MemoryKind, number>();
  // kinds() is read by every batch's routing: built when registrations change, not per call.
  private kindList: readonly MemoryKind[] = [];

  // Regions removed whose transports still hold them (an unregistration under way): see retire().
  private retiringCount = 0;

  get size(): number {
    return this.regions.length;
  }

  all(): readonly LocalRegion[] {
    return this.regions;
  }

  /** Index of the last region starting at or before addr, or -1. */
  private floorIndex(addr: bigint): number {
    let lo = 0;
    let hi = this.regions.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (this.regions[mid]!.addr <= addr) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  }

  /** Throws MEMORY_OVERLAP when [addr, addr+length) intersects a registered region. */
  assertFree(addr: bigint, length: bigint): void {
    const end = addr + length;
    const i = this.floorIndex(end - 1n);
    if (i >= 0) {
      const r = this.regions[i]!;
      if (r.addr + r.length > addr) {
        throw new TransferError(
          'MEMORY_OVERLAP',
          `Memory [0x${addr.toString(16)}, 0x${end.toString(16)}) overlaps the registered region [0x${r.addr.toString(16)}, 0x${(r.addr + r.length).toString(16)}); unregister it first`,
          { details: { addr, length, overlaps: r.addr } },
        );
      }
    }
  }

  insert(region: LocalRegion): void {
    this.assertFree(region.addr, region.length);
    const i = this.floorIndex(region.addr);
    this.regions.splice(i + 1, 0, region);
    const kind = memoryKindOf(region.device);
    this.kindCounts.set(kind, (this.kindCounts.get(kind) ?? 0) + 1);
    this.kindList = this.listKinds();
  }

  /** The memory kinds registered now (the same array until a registration changes them). */
  kinds(): readonly MemoryKind[] {
    return this.kindList;
  }

  private listKinds(): readonly MemoryKind[] {
    return [...this.kindCounts].filter(([, n]) => n > 0).map(([k]) => k);
  }

  /** Removes the region starting exactly at addr; MEMORY_NOT_REGISTERED otherwise. */
  remove(addr: bigint): LocalRegion {
    const i = this.floorIndex(addr);
    const r = i >= 0 ? this.regions[i] : undefined;
    if (!r || r.addr !== addr) {
      throw new TransferError('MEMORY_NOT_REGISTERED', `No registered region starts at 0x${addr.toString(16)}`);
    }
    this.regions.splice(i, 1);
    const kind = memoryKindOf(r.device);
    this.kindCounts.set(kind, this.kindCounts.get(kind)! - 1);
    this.kindList = this.listKinds();
    return r;
  }

  /**
   * Removes the region at addr for an unregistration that goes on until `retired()`: its
   * transports still hold it meanwhile. While any region is retiring, routing checks every
   * request's local range against this map (`retiring`), so a batch from it is refused by
   * the engine, never sent by a transport that is letting go of the memory (each ended such
   * a batch its own way; mooncake-rdma after part of it had landed).
   */
  retire(addr: bigint): LocalRegion {
    const region = this.remove(addr);
    this.retiringCount++;
    return region;
  }

  retired(): void {
    this.retiringCount--;
  }

  /** How many removed regions their transports still hold (0 nearly always). */
  get retiring(): number {
    return this.retiringCount;
  }

  /** The region wholly containing [addr, addr+length), or undefined. */
  find(addr: bigint, length: bigint): LocalRegion | undefined {
    const i = this.floorIndex(addr);
    if (i < 0) return undefined;
    const r = this.regions[i]!;
    return addr + length <= r.addr + r.length ? r : undefined;
  }
}
