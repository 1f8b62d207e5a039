import { kvBufferPairs } from '../plan/index.js';
import type { StatusMessage } from '../protocol/messages.js';
import { crc32, RoomChecksums } from './kv-checksum.js';
import type { RoomRequest } from './kv-sender.js';
import type { PrefillRank } from './prefill-rank.js';

/**
 * A sender's KV checksums, per decode rank it writes (see kv-checksum.ts): recorded as each
 * chunk or layer is written (the caller may reuse a chunk's pages once it settled), sent
 * with the Success report. Only whole-page writes (no head slice, the same page size and
 * layout on both sides) are covered; a room with any other write sends none.
 */
export class SenderChecksums {
  private readonly rooms = new Map<RoomRequest, RoomChecksums | null>();

  private of(rank: PrefillRank, rr: RoomRequest): RoomChecksums | null {
    let c = this.rooms.get(rr);
    if (c !== undefined) return c;
    const src = rank.source;
    const m = rr.dest.msg;
    const wholePages = !rr.req.dummy && !rr.req.kvSlice && m.pageSize === src.buffers.pageSize && (m.pageLayout ?? 'NHD') === (src.buffers.pageLayout ?? 'NHD') && rr.dest.kv.itemLens[0] === src.kv.itemLens[0];
    if (!rank.checksumViews || !wholePages) c = null;
    else {
      const pairs = kvBufferPairs(src.buffers.attention, src.span, rr.dest.span);
      c = new RoomChecksums(Array.from({ length: pairs.length / 2 }, (_, i) => pairs[2 * i]!));
    }
    this.rooms.set(rr, c);
    return c;
  }

  /** Records the pages of one write (absolute `layers`, default all of this stage). */
  record(rank: PrefillRank, rr: RoomRequest, pages: Uint32Array, firstPage: number, layers?: ArrayLike<number>): void {
    const c = rank.checksumViews ? this.of(rank, rr) : null;
    if (!c) return;
    const src = rank.source;
    const only = layers ? new Set(Array.from(kvBufferPairs(src.buffers.attention, src.span, rr.dest.span, layers)).filter((_, i) => i % 2 === 0)) : undefined;
    c.record(rank.checksumViews!, src.kv.itemLens[0]!, pages, firstPage, only);
  }

  /** Adds the room's checksums to its Success report to `rr`'s decode rank, when every page was recorded. */
  addTo(msg: StatusMessage, rank: PrefillRank, rr: RoomRequest, pages: number, auxIndex: number | undefined): void {
    const c = this.rooms.get(rr);
    const sums = c?.wire(pages);
    if (!c || !sums) return;
    msg.checksums = sums;
    msg.checksumLayers = { first: rank.source.span.firstLayer, count: rank.source.span.layers };
    const aux = rank.source.aux;
    if (!rr.req.sendsAux || auxIndex === undefined || aux.addrs.length === 0) return;
    const out = new Uint32Array(aux.addrs.length);
    for (let i = 0; i < aux.addrs.length; i++) {
      const item = aux.itemLens[i]!;
      const view = rank.engine.hostView(BigInt(aux.addrs[i]!) + BigInt(auxIndex * item), BigInt(item));
      if (!view) return;
      out[i] = crc32(view);
    }
    msg.auxChecksums = out;
  }
}
