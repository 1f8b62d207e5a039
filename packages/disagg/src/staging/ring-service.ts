import { TransferError, type AllocatedHandle, type TransferEngine } from '@te/connector';
import { CopyList, StagingCopier } from '@te/staging';
import type { BufferTable } from '../plan/copy-plan.js';
import type { PageGeometry } from '../plan/page-geometry.js';
import { planSliceCopy, type HeadSlice } from '../plan/slice-copy.js';
import { pieceCount, scatterCopies, type PieceSet } from '../plan/slice-pieces.js';
import { handleMessage } from '../protocol/handle.js';
import { RingAllocSchema, ScatterSchema, STAGING_MSG, type RingAllocMessage, type RingWire, type ScatterMessage } from '../protocol/staging-messages.js';
import { PD_PROTOCOL_VERSION } from '../protocol/messages.js';
import { BytePool } from './byte-pool.js';
import { copyDelta, copyDeltas } from './copy-address.js';
import type { ResolvedStaging } from './options.js';

/** What the ring needs of one room of this decode rank. */
export interface ScatterRoom {
  /** Destination pages the room was given (decode pages). */
  pages: Uint32Array;
  /** Tokens per prefill page. */
  prefillPageSize: number;
  /** The head slice prefill rank (tp, pp) sends here; undefined when it sends no KV here. */
  sliceFrom(tpRank: number, ppRank: number): HeadSlice | undefined;
  /** Deadline for ring space, ms. */
  timeoutMs: number;
}

/**
 * A decode rank's staging ring: registered host memory prefill ranks write gathered head
 * slices into when this rank needs slices of several of them interleaved in each page
 * (decode TP below prefill TP, NHD pages). Space is handed out per chunk and per room, a
 * room waits for space within its deadline, and a failed room gives its share back; a
 * scatter of a room that failed or was aborted is refused and touches no page.
 */
export class RingService {
  private readonly pool: BytePool;
  private readonly scattering = new Map<bigint, Set<Promise<void>>>();
  private readonly unhandle: (() => void)[];
  private readonly dstDelta: Float64Array;
  private readonly delta: number;
  readonly wire: RingWire;
  scatteredBytes = 0;
  scatterMs = 0;

  private constructor(
    private readonly engine: TransferEngine,
    private readonly memory: AllocatedHandle,
    private readonly copier: StagingCopier,
    private readonly kv: BufferTable,
    private readonly geometry: (buffer: number) => PageGeometry,
    private readonly roomOf: (room: bigint) => ScatterRoom | undefined,
  ) {
    const length = Number(memory.length);
    this.pool = new BytePool(length, 'decode staging ring');
    this.delta = copyDelta(engine, Number(memory.addr), length);
    this.dstDelta = copyDeltas(engine, kv.addrs, kv.lengths);
    const regions = [{ addr: Number(memory.addr) + this.delta, length }];
    for (let i = 0; i < kv.addrs.length; i++) regions.push({ addr: kv.addrs[i]! + this.dstDelta[i]!, length: kv.lengths[i]! });
    copier.setRegions(regions);
    this.wire = { addr: memory.addr, length: memory.length };
    this.unhandle = [
      handleMessage(engine, STAGING_MSG.ringAlloc, RingAllocSchema, (m) => this.onAlloc(m)),
      handleMessage(engine, STAGING_MSG.scatter, ScatterSchema, (m) => this.onScatter(m)),
    ];
  }

  /**
   * Allocates and registers the ring. `pageBytes` is one decode page of every KV buffer:
   * a ring that cannot hold it could never stage a page, and is refused here.
   */
  static async create(
    engine: TransferEngine,
    options: ResolvedStaging,
    kv: BufferTable,
    pageBytes: number,
    geometry: (buffer: number) => PageGeometry,
    roomOf: (room: bigint) => ScatterRoom | undefined,
  ): Promise<RingService> {
    if (options.ringBytes < pageBytes)
      throw new TransferError(
        'INVALID_ARGUMENT',
        `staging ring of ${options.ringBytes} bytes is smaller than one page of this rank's KV (${pageBytes} bytes over all layers)`,
      );
    const copier = StagingCopier.create(options.threads === undefined ? {} : { threads: options.threads });
    const memory = await engine.allocateMemory(options.ringBytes);
    return new RingService(engine, memory, copier, kv, geometry, roomOf);
  }

  get stats(): { capacity: number; used: number; peak: number; waits: number; scatteredBytes: number; scatterMs: number } {
    return {
      capacity: this.pool.capacity,
      used: this.pool.used,
      peak: this.pool.peak,
      waits: this.pool.waits,
      scatteredBytes: this.scatteredBytes,
      scatterMs: this.scatterMs,
    };
  }

  private room(m: { room: bigint; prefillTpRank: number; prefillPpRank: number }): { room: ScatterRoom; slice: HeadSlice } {
    const room = this.roomOf(m.room);
    if (!room)
      throw new TransferError('ABORTED', `room ${m.room} is not in flight on this decode rank (failed, aborted or finished)`, { details: { room: m.room } });
    const slice = room.sliceFrom(m.prefillTpRank, m.prefillPpRank);
    if (!slice)
      throw new TransferError(
        'INVALID_ARGUMENT',
        `room ${m.room}: prefill rank tp=${m.prefillTpRank} pp=${m.prefillPpRank} sends no staged KV to this decode rank`,
        { details: { room: m.room } },
      );
    return { room, slice };
  }

  private async onAlloc(m: RingAllocMessage): Promise<{ offset: number }> {
    const { room } = this.room(m);
    return { offset: await this.pool.alloc(m.bytes, m.room, room.timeoutMs) };
  }

  private async onScatter(m: ScatterMessage): Promise<{ v: number }> {
    const { room, slice } = this.room(m);
    if (!this.pool.owns(m.room, m.offset, m.bytes))
      throw new TransferError('ADDRESS_OUT_OF_RANGE', `room ${m.room}: ring [${m.offset}, +${m.bytes}) is not a piece this room was given`, {
        details: { room: m.room },
      });
    const set = this.pieces(m, room, slice);
    if (m.firstPiece + m.pieces > pieceCount(set) || m.pieces * set.copy.bytes !== m.bytes) {
      throw new TransferError(
        'INVALID_ARGUMENT',
        `room ${m.room}: ${m.pieces} pieces from ${m.firstPiece} of ${set.copy.bytes} bytes do not make the ${m.bytes} bytes sent (${pieceCount(set)} pieces in all)`,
        { details: { room: m.room } },
      );
    }
    const jobs = new CopyList(m.pieces);
    scatterCopies(set, jobs, Number(this.memory.addr) + this.delta + m.offset, m.firstPiece, m.firstPiece + m.pieces, this.dstDelta);
    const t0 = performance.now();
    const run = this.copier.copy(jobs.finish());
    let mine = this.scattering.get(m.room);
    if (!mine) this.scattering.set(m.room, (mine = new Set()));
    mine.add(run);
    try {
      await run;
      this.scatteredBytes += m.bytes;
      this.scatterMs += performance.now() - t0;
    } finally {
      mine.delete(run);
      if (mine.size === 0) this.scattering.delete(m.room);
      this.pool.release(m.offset);
    }
    return { v: PD_PROTOCOL_VERSION };
  }

  /** The room's pieces as the prefill rank laid them out, from this side's knowledge alone. */
  private pieces(m: ScatterMessage, room: ScatterRoom, slice: HeadSlice): PieceSet {
    const bad = (why: string): never => {
      throw new TransferError('INVALID_ARGUMENT', `room ${m.room}: scatter refused: ${why}`, { details: { room: m.room } });
    };
    const n = this.kv.addrs.length;
    if (m.dstBuffers.length === 0 || m.dstBuffers.length > n) bad(`${m.dstBuffers.length} destination buffers (this rank has ${n})`);
    const first = m.dstBuffers[0]!;
    for (const b of m.dstBuffers)
      if (b >= n || this.kv.itemLens[b] !== this.kv.itemLens[first]) bad(`destination buffer ${b} does not exist or differs in page size`);
    const dst = this.geometry(first);
    if (dst.tokens % room.prefillPageSize !== 0) bad(`decode pages of ${dst.tokens} tokens do not hold whole prefill pages of ${room.prefillPageSize}`);
    const perDst = dst.tokens / room.prefillPageSize;
    if (Math.ceil((m.firstPage + m.pageCount) / perDst) > room.pages.length)
      bad(`source pages up to ${m.firstPage + m.pageCount} need more than the ${room.pages.length} destination pages given`);
    const dPages = Math.floor(this.kv.lengths[first]! / this.kv.itemLens[first]!);
    for (let d = Math.floor(m.firstPage / perDst); d < Math.ceil((m.firstPage + m.pageCount) / perDst); d++)
      if (room.pages[d]! >= dPages) bad(`destination page ${room.pages[d]} is outside the buffer (${dPages} pages)`);
    // The image is in this side's order whatever the prefill's layout: plan it as if the source were laid out like the destination.
    const src: PageGeometry = { tokens: room.prefillPageSize, heads: slice.count, headBytes: dst.headBytes, layout: dst.layout };
    const copy = planSliceCopy(src, dst, { srcOffset: 0, dstOffset: slice.dstOffset, count: slice.count });
    const pairs = new Int32Array(m.dstBuffers.length * 2);
    m.dstBuffers.forEach((b, i) => (pairs[2 * i + 1] = b));
    const unused = { addrs: new Float64Array(1), lengths: new Float64Array(1), itemLens: new Float64Array(1) };
    return { src: unused, dst: this.kv, pairs, srcPages: new Uint32Array(m.pageCount), firstPage: m.firstPage, dstPages: room.pages, perDst, copy };
  }

  /** A failing room's requests for ring space are refused at once. */
  refuseRoom(room: bigint, error: TransferError): void {
    this.pool.refuseWaiters(room, error);
  }

  /**
   * Gives a failed room's ring space back: only once its prefill ranks acknowledged that
   * no write of it is in flight (a write still landing would corrupt the next room's image).
   */
  releaseRoom(room: bigint): void {
    this.pool.releaseOwner(room);
  }

  /** Resolves once no scatter of `room` runs (an abort is acknowledged only then). */
  async quiet(room: bigint): Promise<void> {
    for (let s = this.scattering.get(room); s && s.size > 0; s = this.scattering.get(room)) await Promise.allSettled([...s]);
  }

  async close(): Promise<void> {
    for (const u of this.unhandle) u();
    this.pool.close(new TransferError('ENGINE_CLOSED', 'the KV manager closed'));
    await Promise.allSettled([...this.scattering.values()].flatMap((s) => [...s]));
    await this.engine.freeMemory(this.memory).catch(() => undefined);
  }
}
