import { TransferError } from '@te/connector';
import type { Destination } from './destination.js';

/**
 * The decode ranks registered with one prefill rank, by `segment#tpRank`, least recently
 * used first (registering or requesting moves an entry to the end). Bounded: a decode lost
 * to the heartbeat is dropped once no room uses it, and at the cap a failed, else the
 * oldest idle, entry is evicted (a live decode that was evicted hears STALE_DESCRIPTOR and
 * registers again).
 */
export class DestinationTable {
  private readonly byKey = new Map<string, Destination>();

  /** `inUse`: the destinations a room still refers to (never evicted or dropped). */
  constructor(
    private readonly max: number,
    private readonly inUse: () => Iterable<Destination>,
  ) {}

  get size(): number {
    return this.byKey.size;
  }

  /** Registering again (a restart: new epoch) replaces the old entry and clears its failure. */
  register(key: string, dest: Destination): void {
    if (!this.byKey.delete(key) && this.byKey.size >= this.max) this.evict();
    this.byKey.set(key, dest);
  }

  /** The registration a request names, moved to the end (eviction takes idle ones first). */
  use(key: string): Destination | undefined {
    const dest = this.byKey.get(key);
    if (!dest) return undefined;
    this.byKey.delete(key);
    this.byKey.set(key, dest);
    return dest;
  }

  /** A decode stopped answering heartbeats: its registrations fail later rooms fast and go once unused. */
  lose(segment: string): void {
    for (const d of this.byKey.values()) {
      if (d.segment !== segment) continue;
      d.failed ??= new TransferError('PEER_FAILED', `decode ${segment} stopped answering heartbeats`);
      d.lost = true;
    }
    this.dropLost();
  }

  /** Drops the destinations whose decode was lost and that no room uses any more. */
  dropLost(): void {
    let used: Set<Destination> | undefined;
    for (const [key, d] of this.byKey) {
      if (!d.lost) continue;
      used ??= new Set(this.inUse());
      if (!used.has(d)) this.byKey.delete(key);
    }
  }

  /** Makes room for one more destination: a failed one no room uses, else the least recently used idle one. */
  private evict(): void {
    const used = new Set(this.inUse());
    let victim: string | undefined;
    for (const [key, d] of this.byKey) {
      if (used.has(d)) continue;
      if (d.failed) {
        victim = key;
        break;
      }
      victim ??= key;
    }
    if (victim === undefined)
      throw new TransferError('POOL_EXHAUSTED', `${this.max} decode ranks are registered and every one has a room in flight; retry later`);
    this.byKey.delete(victim);
  }
}
