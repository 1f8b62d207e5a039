import { ChecksumList } from '@te/staging';
import { kvBufferPairs, shardOfRank, planSliceCopy, type SliceCopy } from '../plan/index.js';
import type { StatusMessage } from '../protocol/messages.js';
import { HostTable, pushSource, runChecksums } from './kv-checksum.js';
import { geometries } from './kv-write.js';
import type { PrefillRoomContext, RoomRequest } from './room-context.js';
import { statePairs } from './transfer-plan.js';

/** A prefill rank's buffers as the checksummer reads them, made once per rank. */
interface RankHost {
  kv: HostTable;
  aux: HostTable;
  state: HostTable | undefined;
}

const hosts = new WeakMap<PrefillRoomContext, RankHost>();

function hostOf(rank: PrefillRoomContext): RankHost {
  let h = hosts.get(rank);
  if (!h) {
    const s = rank.source;
    h = { kv: new HostTable(rank.engine, s.kv), aux: new HostTable(rank.engine, s.aux), state: s.state ? new HostTable(rank.engine, s.state) : undefined };
    hosts.set(rank, h);
  }
  return h;
}

/** One decode rank's checksums of a room, as they are taken. */
interface RoomSums {
  /** Column of each source KV buffer the room writes (page-major rows of `columns` sums). */
  columns: Map<number, number>;
  kv: number[];
  /** Set when a piece could not be planned (a geometry only the per-token planner serves): the room sends no KV checksums. */
  kvUnplanned: boolean;
  /** Per state buffer pair (index into statePairs), one sum per slot. */
  state: Map<number, Uint32Array>;
}

/** Waits for a write and the checksums taken beside it (both read its source until then); the write's error first. */
export async function alongside(sums: Promise<void>, write: Promise<void>): Promise<void> {
  const [w, s] = await Promise.allSettled([write, sums]);
  if (w.status === 'rejected') throw w.reason;
  if (s.status === 'rejected') throw s.reason;
}

/**
 * A sender's checksums (see kv-checksum.ts), per decode rank it writes: taken from the source
 * while each chunk, layer or state is written (the caller may reuse a chunk's pages once it
 * settled), sent with the Success report. Every route is covered; a room whose pieces cannot
 * be planned (pages only the per-token planner serves) sends no KV checksums, and neither
 * does a rank whose KV is not host memory.
 */
export class SenderChecksums {
  private readonly rooms = new Map<RoomRequest, RoomSums>();

  private of(rank: PrefillRoomContext, rr: RoomRequest): RoomSums {
    let c = this.rooms.get(rr);
    if (!c) {
      const pairs = kvBufferPairs(rank.source.buffers.attention, rank.source.span, rr.dest.span);
      const columns = new Map<number, number>();
      for (let i = 0; i < pairs.length; i += 2) columns.set(pairs[i]!, i / 2);
      c = { columns, kv: [], kvUnplanned: false, state: new Map() };
      this.rooms.set(rr, c);
    }
    return c;
  }

  /** Checksums the pages of one KV write (absolute `layers`, default all of this stage) from the source. */
  async record(rank: PrefillRoomContext, rr: RoomRequest, pages: Uint32Array, firstPage: number, layers?: ArrayLike<number>): Promise<void> {
    if (!rank.checksumViews || rr.req.dummy || pages.length === 0) return;
    const c = this.of(rank, rr);
    if (c.kvUnplanned) return;
    const src = rank.source;
    const pairs = kvBufferPairs(src.buffers.attention, src.span, rr.dest.span, layers);
    const g = geometries(src, rr.dest, rr.req);
    const copies: SliceCopy[] = [];
    try {
      for (let p = 0; p < pairs.length; p += 2) {
        const sItem = src.kv.itemLens[pairs[p]!]!;
        const dItem = rr.dest.kv.itemLens[pairs[p + 1]!]!;
        copies.push(
          planSliceCopy({ ...g.src, headBytes: sItem / (g.src.tokens * g.src.heads) }, { ...g.dst, headBytes: dItem / (g.dst.tokens * g.dst.heads) }, g.slice),
        );
      }
    } catch (e) {
      if (!(e instanceof RangeError)) throw e;
      c.kvUnplanned = true;
      return;
    }
    const host = hostOf(rank).kv;
    const list = new ChecksumList(pages.length * copies.length);
    for (let p = 0; p < copies.length; p++) for (let k = 0; k < pages.length; k++) pushSource(list, copies[p]!, host.item(pairs[2 * p]!, pages[k]!));
    const crcs = await runChecksums(host.regions(), list);
    const n = c.columns.size;
    for (let p = 0; p < copies.length; p++) {
      const col = c.columns.get(pairs[2 * p]!)!;
      for (let k = 0; k < pages.length; k++) c.kv[(firstPage + k) * n + col] = crcs[p * pages.length + k]!;
    }
  }

  /** Checksums the state slots `srcIndices` of the state buffers written (`only`: source state buffers, default all). */
  async recordState(rank: PrefillRoomContext, rr: RoomRequest, srcIndices: Uint32Array, only?: ReadonlySet<number>): Promise<void> {
    const src = rank.source;
    const host = hostOf(rank).state;
    if (!rank.checksumViews || !host?.host || !src.state || !rr.dest.state || !rr.req.sendsState || srcIndices.length === 0) return;
    const pairs = statePairs(src, rr.dest);
    const slice = rr.req.stateSlice;
    const units = slice ? shardOfRank(src.buffers.state!.totalUnits!, src.layout.attnTpSize, src.layout.attnTpRank).count : 1;
    const list = new ChecksumList();
    const taken: number[] = [];
    for (let p = 0; p < pairs.length / 2; p++) {
      const sb = pairs[2 * p]!;
      if (only && !only.has(sb)) continue;
      taken.push(p);
      const item = src.state.itemLens[sb]!;
      const unit = item / units;
      for (const slot of srcIndices) list.push(host.item(sb, slot) + (slice ? slice.srcOffset * unit : 0), slice ? slice.count * unit : item);
    }
    const crcs = await runChecksums(host.regions(), list);
    const c = this.of(rank, rr);
    taken.forEach((p, j) => c.state.set(p, crcs.slice(j * srcIndices.length, (j + 1) * srcIndices.length)));
  }

  /**
   * The KV checksums of the room's pages [firstPage, firstPage + count) to `rr`'s decode
   * rank, when every one of them was recorded (undefined otherwise): a chunk's, reported
   * once it settled so the decode checks it while the rest is written (SumsSchema), or the
   * whole room's, with its Success report.
   */
  chunkSums(
    rank: PrefillRoomContext,
    rr: RoomRequest,
    firstPage: number,
    count: number,
  ): { kvCrc32c: Uint32Array; checksumLayers: { first: number; count: number } } | undefined {
    const c = this.rooms.get(rr);
    if (!rank.checksumViews || !c || c.kvUnplanned || count === 0) return undefined;
    const n = c.columns.size;
    const out = new Uint32Array(count * n);
    for (let i = 0; i < out.length; i++) {
      const v = c.kv[firstPage * n + i];
      if (v === undefined) return undefined;
      out[i] = v;
    }
    return { kvCrc32c: out, checksumLayers: { first: rank.source.span.firstLayer, count: rank.source.span.layers } };
  }

  /** Adds the room's checksums to its Success report to `rr`'s decode rank: KV when every page was recorded, state when every buffer was, aux. */
  async addTo(msg: StatusMessage, rank: PrefillRoomContext, rr: RoomRequest, pages: number, auxIndex: number | undefined): Promise<void> {
    if (!rank.checksumViews) return;
    const c = this.rooms.get(rr);
    const src = rank.source;
    const kv = this.chunkSums(rank, rr, 0, pages);
    if (kv) {
      msg.kvCrc32c = kv.kvCrc32c;
      msg.checksumLayers = kv.checksumLayers;
    }
    if (c && c.state.size > 0 && src.state && rr.dest.state) {
      const pairs = statePairs(src, rr.dest);
      const count = pairs.length / 2;
      if (c.state.size === count) {
        const per = c.state.get(0)!.length;
        const out = new Uint32Array(count * per);
        for (let p = 0; p < count; p++) out.set(c.state.get(p)!, p * per);
        msg.stateCrc32c = out;
        msg.stateBuffers = Uint32Array.from({ length: count }, (_, p) => pairs[2 * p + 1]!);
      }
    }
    const aux = hostOf(rank).aux;
    if (!rr.req.sendsAux || auxIndex === undefined || src.aux.addrs.length === 0 || !aux.host) return;
    const list = new ChecksumList(src.aux.addrs.length);
    for (let i = 0; i < src.aux.addrs.length; i++) list.push(aux.item(i, auxIndex), src.aux.itemLens[i]!);
    msg.auxCrc32c = await runChecksums(aux.regions(), list);
  }
}
