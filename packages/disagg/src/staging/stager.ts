import { OP_WRITE, TransferError, type TransferBatch, type TransferEngine, type AllocatedHandle } from '@te/connector';
import { CopyList, StagingCopier } from '@te/staging';
import { gatherCopies, packedBatch, pieceCount, stagedBatch, type PieceSet } from '../plan/slice-pieces.js';
import { BytePool } from './byte-pool.js';
import { copyDelta, copyDeltas } from './copy-address.js';
import type { ResolvedStaging } from './options.js';

/** The decode side of the ring route, as one room's writer sees it. */
export interface RingTarget {
  /** Ring capacity the decode offered. */
  capacity: number;
  /** Engine address of the ring's start. */
  addr: number;
  alloc(bytes: number): Promise<number>;
  scatter(offset: number, bytes: number, firstPiece: number, pieces: number): Promise<void>;
}

export interface StagedWrite {
  set: PieceSet;
  /** Writes a batch to the room's destination (tracked by the room: deadline, abort, settle). */
  submit(batch: TransferBatch): Promise<void>;
  owner: unknown;
  timeoutMs: number;
  /** Present for the ring route. */
  ring?: RingTarget;
  /** The room failed or was aborted: no further chunk is gathered, written or scattered. */
  signal?: AbortSignal;
}

function checkNotAborted(w: StagedWrite): void {
  if (w.signal?.aborted) throw new TransferError('ABORTED', 'the room was aborted or failed; its remaining staged chunks were not written');
}

/** One chunk of a staged write: pieces [from, to), its place in the decode's ring and in this side's staging (-1: none). */
interface Chunk {
  from: number;
  to: number;
  ringOffset: number;
  local: number;
}

/** Writes in flight per destination at once: chunk k+1 is gathered while chunk k is on the wire. */
const WINDOW = 2;

/**
 * A prefill rank's staging memory: registered host memory, a pool over it, and the
 * native copier that gathers head slices into it. Created on first use.
 */
export class Stager {
  private constructor(
    private readonly engine: TransferEngine,
    private readonly copier: StagingCopier,
    private readonly memory: AllocatedHandle,
    private readonly pool: BytePool,
    private readonly base: number,
    private readonly delta: number,
    private readonly srcDelta: Float64Array,
    private readonly chunkBytes: number,
  ) {}

  static async create(engine: TransferEngine, options: ResolvedStaging, kv: { addrs: Float64Array; lengths: Float64Array }): Promise<Stager> {
    const copier = StagingCopier.create(options.threads === undefined ? {} : { threads: options.threads });
    const memory = await engine.allocateMemory(options.bytes, { remoteAccess: false });
    const base = Number(memory.addr);
    const delta = copyDelta(engine, base, options.bytes);
    const srcDelta = copyDeltas(engine, kv.addrs, kv.lengths);
    const regions = [{ addr: base + delta, length: options.bytes }];
    for (let i = 0; i < kv.addrs.length; i++) regions.push({ addr: kv.addrs[i]! + srcDelta[i]!, length: kv.lengths[i]! });
    copier.setRegions(regions);
    return new Stager(
      engine,
      copier,
      memory,
      new BytePool(options.bytes, 'prefill staging memory'),
      base,
      delta,
      srcDelta,
      Math.min(options.chunkBytes, Math.floor(options.bytes / 4)),
    );
  }

  get stats(): { capacity: number; used: number; peak: number; waits: number } {
    return { capacity: this.pool.capacity, used: this.pool.used, peak: this.pool.peak, waits: this.pool.waits };
  }

  /** Pieces per chunk: what fits in a chunk of this side's staging and of the decode's ring. */
  private chunkPieces(w: StagedWrite): number {
    const cap = Math.min(this.chunkBytes, w.ring ? Math.floor(w.ring.capacity / 4) : Infinity);
    return Math.max(1, Math.floor(cap / w.set.copy.bytes));
  }

  /** Pieces too large for either staging memory at all: refused, they can never fit. */
  check(w: StagedWrite): void {
    const bytes = w.set.copy.bytes;
    if (bytes > this.pool.capacity)
      throw new TransferError('INVALID_ARGUMENT', `a page slice of ${bytes} bytes can never fit in ${this.pool.capacity} bytes of prefill staging memory`);
    if (w.ring && bytes > w.ring.capacity)
      throw new TransferError('INVALID_ARGUMENT', `a page slice of ${bytes} bytes can never fit in the decode's staging ring of ${w.ring.capacity} bytes`);
  }

  /**
   * Gathers the pieces chunk by chunk and writes each: straight into the destination
   * pages (gather route) or into the decode's ring, which scatters it (ring route). Pieces
   * that are whole ranges of the source need no gathering: on the ring route they are
   * written from the pages into the ring as they are. The first error stops new chunks;
   * it is thrown once the chunks in flight settled.
   */
  async write(w: StagedWrite): Promise<{ descriptors: number; chunks: number; gatherMs: number }> {
    this.check(w);
    const total = pieceCount(w.set);
    const per = this.chunkPieces(w);
    const direct = w.ring !== undefined && w.set.copy.srcContiguous;
    const inflight = new Set<Promise<void>>();
    let failure: unknown;
    let descriptors = 0;
    let chunks = 0;
    let gatherMs = 0;
    for (let from = 0; from < total && failure === undefined; from += per) {
      const chunk: Chunk = { from, to: Math.min(total, from + per), ringOffset: -1, local: -1 };
      try {
        checkNotAborted(w);
        const bytes = (chunk.to - from) * w.set.copy.bytes;
        if (w.ring) chunk.ringOffset = await w.ring.alloc(bytes);
        if (!direct) gatherMs += await this.gather(w, chunk, bytes);
      } catch (e) {
        if (chunk.local >= 0) this.pool.release(chunk.local);
        failure = e;
        break;
      }
      chunks++;
      const step = this.writeChunk(w, chunk).then(
        (n) => void (descriptors += n),
        (e: unknown) => void (failure ??= e),
      );
      inflight.add(step);
      void step.then(() => inflight.delete(step));
      if (inflight.size >= WINDOW) await Promise.race(inflight);
    }
    await Promise.all(inflight);
    if (failure !== undefined) throw failure;
    return { descriptors, chunks, gatherMs };
  }

  /** Takes staging memory for `chunk` and gathers its pieces into it; the copier's time in ms. */
  private async gather(w: StagedWrite, chunk: Chunk, bytes: number): Promise<number> {
    chunk.local = await this.pool.alloc(bytes, w.owner, w.timeoutMs);
    const jobs = new CopyList(chunk.to - chunk.from);
    gatherCopies(w.set, jobs, this.base + this.delta + chunk.local, chunk.from, chunk.to, this.srcDelta);
    const t0 = performance.now();
    await this.copier.copy(jobs.finish());
    return performance.now() - t0;
  }

  /** Writes a chunk (gathered, or straight from the pages), then has the ring scatter it; the descriptors it took. */
  private async writeChunk(w: StagedWrite, chunk: Chunk): Promise<number> {
    const { from, to, ringOffset, local } = chunk;
    const bytes = (to - from) * w.set.copy.bytes;
    try {
      if (!w.ring) {
        const batch = stagedBatch(w.set, this.base + local, from, to);
        await w.submit(batch.finish());
        return batch.count;
      }
      const target = w.ring.addr + ringOffset;
      const batch = local < 0 ? packedBatch(w.set, target, from, to).finish() : singleWrite(this.base + local, target, bytes);
      await w.submit(batch);
      // Written to the ring: the decode scatters it only for a room still in flight there.
      checkNotAborted(w);
      await w.ring.scatter(ringOffset, bytes, from, to - from);
      return batch.opcodes.length;
    } finally {
      if (local >= 0) this.pool.release(local);
    }
  }

  /** A failed room's chunks waiting for staging memory give up (those in flight release theirs once their write settled). */
  refuse(owner: unknown, error: TransferError): void {
    this.pool.refuseWaiters(owner, error);
  }

  async close(): Promise<void> {
    this.pool.close(new TransferError('ENGINE_CLOSED', 'the KV manager closed'));
    await this.engine.freeMemory(this.memory).catch(() => undefined);
  }
}

function singleWrite(local: number, remote: number, length: number): TransferBatch {
  return {
    opcodes: Uint8Array.of(OP_WRITE),
    localAddrs: BigUint64Array.of(BigInt(local)),
    remoteAddrs: BigUint64Array.of(BigInt(remote)),
    lengths: BigUint64Array.of(BigInt(length)),
  };
}
