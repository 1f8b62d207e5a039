import { TransferError, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import type { PrefillInfo } from '../bootstrap/schema.js';
import type { BufferTable } from '../plan/copy-plan.js';
import { kvHeadsOf } from '../pd/transfer-plan.js';
import type { PageGeometry } from '../plan/page-geometry.js';
import { planSliceCopy, type HeadSlice } from '../plan/slice-copy.js';
import type { RingWire } from '../protocol/staging-messages.js';
import { stagingBlocker } from './kv-staging.js';
import type { ResolvedStaging } from './options.js';
import { RingService, type ScatterRoom } from './ring-service.js';

/**
 * A decode rank's side of staging: the ring prefill ranks write slices into when this
 * rank's pages interleave several of them (or hold several prefill pages per head), made
 * on the first room that needs it, so a rank that never does allocates nothing.
 */
export class DecodeStaging {
  private ring: RingService | undefined;
  private creating: Promise<RingService> | undefined;
  /** Why this rank offers no ring although a room would use one (logged once). */
  private told = false;
  /** Why making the ring failed: not tried again. */
  private failed: string | undefined;

  constructor(
    private readonly engine: TransferEngine,
    private options: ResolvedStaging,
    private readonly buffers: KVBuffers,
    private readonly layout: ParallelLayout,
    private readonly kv: BufferTable,
    private readonly roomOf: (room: bigint) => ScatterRoom | undefined,
    private readonly log: (message: string) => void,
  ) {
    // Checked when the buffers are registered, not when the first room needs the ring.
    const page = this.pageBytes();
    if (options.enabled && options.ringBytes > 0 && options.ringBytes < page) {
      if (options.ringExplicit)
        throw new TransferError(
          'INVALID_ARGUMENT',
          `staging ring of ${options.ringBytes} bytes is smaller than one page of this rank's KV (${page} bytes over all layers): give staging.ringBytes at least that, or 0 for no ring`,
        );
      this.options = { ...options, ringBytes: 4 * page };
    }
  }

  /** This rank's page geometry (KV buffer `buffer`). */
  geometry(buffer: number): PageGeometry {
    const b = this.buffers;
    const heads = kvHeadsOf(b.attention, this.layout.attnTpSize, this.layout.attnTpRank, b.totalKvHeads, b.kvHeadsPerRank);
    return { tokens: b.pageSize, heads, headBytes: this.kv.itemLens[buffer]! / (b.pageSize * heads), layout: b.pageLayout ?? 'NHD' };
  }

  /** Whether a slice from a prefill with pages of `prefillPageSize` tokens lands in more than one range per page here. */
  needsRing(prefillPageSize: number, slice: HeadSlice | undefined): boolean {
    const dst = this.geometry(0);
    const count = slice?.count ?? dst.heads;
    if (dst.tokens % prefillPageSize !== 0 || !Number.isInteger(dst.headBytes)) return false; // refused elsewhere
    const src: PageGeometry = { tokens: prefillPageSize, heads: count, headBytes: dst.headBytes, layout: dst.layout };
    return !planSliceCopy(src, dst, { srcOffset: 0, dstOffset: slice?.dstOffset ?? 0, count }).dstContiguous;
  }

  /**
   * Makes the ring when a room with this prefill needs one and staging can run here.
   * Returns whether the ring exists now (registrations made before must be redone to carry it).
   */
  async prepare(info: PrefillInfo, slices: (HeadSlice | undefined)[]): Promise<RingWire | undefined> {
    if (this.ring) return this.ring.wire;
    if (!slices.some((s) => this.needsRing(info.page_size, s))) return undefined;
    const why = !this.options.enabled ? 'staging disabled' : this.options.ringBytes === 0 ? 'staging.ringBytes is 0' : stagingBlocker(this.buffers.device);
    if (why) {
      if (!this.told) this.log(`no staging ring on this decode rank (${why}): prefill ranks write interleaved head slices row by row`);
      this.told = true;
      return undefined;
    }
    if (this.failed) return undefined;
    this.creating ??= RingService.create(this.engine, this.options, this.kv, this.pageBytes(), (b) => this.geometry(b), this.roomOf);
    try {
      this.ring = await this.creating;
    } catch (e) {
      // No ring (a transport's allocator too small for it, no memory): prefill ranks write
      // interleaved slices row by row, and say so; the room itself is not failed for it.
      this.failed = (e as Error).message;
      this.log(`no staging ring on this decode rank (${this.failed}): prefill ranks write interleaved head slices row by row`);
      return undefined;
    }
    return this.ring.wire;
  }

  /** One page of every KV buffer: the least a ring must hold. */
  pageBytes(): number {
    let n = 0;
    for (let i = 0; i < this.kv.itemLens.length; i++) n += this.kv.itemLens[i]!;
    return n;
  }

  get stats(): RingService['stats'] | undefined {
    return this.ring?.stats;
  }

  refuse(room: bigint, error: TransferError): void {
    this.ring?.refuseRoom(room, error);
  }

  release(room: bigint): void {
    this.ring?.releaseRoom(room);
  }

  quiet(room: bigint): Promise<void> {
    return this.ring ? this.ring.quiet(room) : Promise.resolve();
  }

  async close(): Promise<void> {
    const ring = this.ring ?? (await this.creating?.catch(() => undefined));
    await ring?.close();
  }
}
