import { allocateBatch, OP_WRITE, type TransferBatch } from '@te/connector';
import { DescriptorWriter } from './descriptor-writer.js';
import type { SliceCopy } from './slice-copy.js';
import type { BufferTable } from './copy-plan.js';

/**
 * The pieces of one KV write: every (buffer pair, source page) of the call, pair-major,
 * each one source page's head slice of one layer's K or V. A staging image holds pieces
 * [first, end) packed in this order, each `copy.bytes` long in the destination's order.
 */
export interface PieceSet {
  src: BufferTable;
  dst: BufferTable;
  /** `[srcBuffer, dstBuffer, ...]`. */
  pairs: Int32Array;
  /** Source pages of this call. */
  srcPages: Uint32Array;
  /** Index of `srcPages[0]` among the room's source pages (chunked prefill sends them in order). */
  firstPage: number;
  /** The room's destination pages (each holds `perDst` source pages). */
  dstPages: Uint32Array;
  perDst: number;
  copy: SliceCopy;
}

export function pieceCount(s: PieceSet): number {
  return (s.pairs.length / 2) * s.srcPages.length;
}

/** Source and destination item bases of piece `index` (no offsets applied), and its sub-page in the destination page. */
function bases(s: PieceSet, index: number): [number, number, number] {
  const n = s.srcPages.length;
  const p = Math.floor(index / n);
  const k = index - p * n;
  const sb = s.pairs[2 * p]!;
  const db = s.pairs[2 * p + 1]!;
  const page = s.firstPage + k;
  const dPage = s.dstPages[Math.floor(page / s.perDst)]!;
  return [s.src.addrs[sb]! + s.srcPages[k]! * s.src.itemLens[sb]!, s.dst.addrs[db]! + dPage * s.dst.itemLens[db]!, page % s.perDst];
}

/** Pieces [from, from + count) as arrays: each one's source item base, where it starts at the destination, and its buffer pair. */
interface PieceAddresses {
  count: number;
  src: Float64Array;
  dst: Float64Array;
  pair: Int32Array;
}

/** Reused by every call (planning is synchronous, and no caller keeps it past its own loop): no typed arrays allocated per chunk. */
const scratch: PieceAddresses = { count: 0, src: new Float64Array(256), dst: new Float64Array(256), pair: new Int32Array(256) };

/**
 * The addresses of pieces [from, to) in order, in one pass without a division per piece
 * and without a call per piece (planning walks 10^5 pieces for a long request; its callers
 * then loop over plain arrays). The arrays are shared scratch: valid until the next call.
 */
function pieceAddresses(s: PieceSet, from: number, to: number): PieceAddresses {
  const count = Math.max(0, to - from);
  if (scratch.src.length < count) {
    const size = Math.max(count, 2 * scratch.src.length);
    scratch.src = new Float64Array(size);
    scratch.dst = new Float64Array(size);
    scratch.pair = new Int32Array(size);
  }
  const out = scratch;
  const n = s.srcPages.length;
  out.count = n === 0 ? 0 : count;
  if (out.count === 0) return out;
  const c = s.copy;
  let p = Math.floor(from / n);
  let k = from - p * n;
  let sBase = s.src.addrs[s.pairs[2 * p]!]!;
  let sItem = s.src.itemLens[s.pairs[2 * p]!]!;
  let dBase = s.dst.addrs[s.pairs[2 * p + 1]!]! + c.dstOffset;
  let dItem = s.dst.itemLens[s.pairs[2 * p + 1]!]!;
  const m = s.perDst;
  const { src, dst, pair } = out;
  for (let j = 0; j < count; j++) {
    const page = s.firstPage + k;
    const d = m === 1 ? s.dstPages[page]! : s.dstPages[Math.floor(page / m)]!;
    const sub = m === 1 ? 0 : page % m;
    src[j] = sBase + s.srcPages[k]! * sItem;
    dst[j] = dBase + d * dItem + sub * c.subStride;
    pair[j] = p;
    if (++k === n && j + 1 < count) {
      k = 0;
      p++;
      sBase = s.src.addrs[s.pairs[2 * p]!]!;
      sItem = s.src.itemLens[s.pairs[2 * p]!]!;
      dBase = s.dst.addrs[s.pairs[2 * p + 1]!]! + c.dstOffset;
      dItem = s.dst.itemLens[s.pairs[2 * p + 1]!]!;
    }
  }
  return out;
}

/** Calls `each(i, srcItem, dstPiece, pair)` for pieces [from, to) in order, with the source item base and where the piece starts at the destination. */
function forPieces(s: PieceSet, from: number, to: number, each: (i: number, srcItem: number, dstPiece: number, pair: number) => void): void {
  const { count, src, dst, pair } = pieceAddresses(s, from, to);
  for (let j = 0; j < count; j++) each(from + j, src[j]!, dst[j]!, pair[j]!);
}

/** Where piece `index` starts at the destination. */
export function pieceDestination(s: PieceSet, index: number): number {
  const [, d, sub] = bases(s, index);
  return d + s.copy.dstOffset + sub * s.copy.subStride;
}

/**
 * Checks that every piece lies inside its buffers before anything is planned from it: the
 * source pages and the destination pages the call maps to.
 */
export function checkPieces(s: PieceSet): void {
  const need = Math.ceil((s.firstPage + s.srcPages.length) / s.perDst);
  if (need > s.dstPages.length)
    throw new RangeError(
      `source pages [${s.firstPage}, ${s.firstPage + s.srcPages.length}) need ${need} destination pages of ${s.perDst} source pages each; ${s.dstPages.length} were given`,
    );
  for (let p = 0; p < s.pairs.length; p += 2) {
    const sb = s.pairs[p]!;
    const db = s.pairs[p + 1]!;
    if (sb < 0 || sb >= s.src.addrs.length || db < 0 || db >= s.dst.addrs.length) throw new RangeError(`buffer pair ${sb}→${db} does not exist`);
    const sCap = Math.floor(s.src.lengths[sb]! / s.src.itemLens[sb]!);
    const dCap = Math.floor(s.dst.lengths[db]! / s.dst.itemLens[db]!);
    for (let k = 0; k < s.srcPages.length; k++)
      if (s.srcPages[k]! >= sCap) throw new RangeError(`source page ${s.srcPages[k]} is outside buffer ${sb} (${sCap} pages)`);
    for (let d = Math.floor(s.firstPage / s.perDst); d < need; d++)
      if (s.dstPages[d]! >= dCap) throw new RangeError(`destination page ${s.dstPages[d]} is outside buffer ${db} (${dCap} pages)`);
  }
}

/**
 * Descriptors straight from the source pages to the destination pages: one per piece when
 * both sides are contiguous (merged across pieces that continue each other), else one per
 * row of the copy (the per-token path of NHD head slices).
 */
export function directBatch(s: PieceSet, from = 0, to = pieceCount(s)): DescriptorWriter {
  const c = s.copy;
  const whole = c.srcContiguous && c.dstContiguous;
  const w = new DescriptorWriter((to - from) * (whole ? 1 : c.rows * c.reps));
  for (let i = from; i < to; i++) {
    const [sBase, dBase, sub] = bases(s, i);
    const src = sBase + c.srcOffset;
    const dst = dBase + c.dstOffset + sub * c.subStride;
    if (whole) {
      w.pushMerged(src, dst, c.bytes);
      continue;
    }
    for (let r = 0; r < c.reps; r++) {
      for (let j = 0; j < c.rows; j++) w.pushMerged(src + r * c.srcRepStride + j * c.srcPitch, dst + r * c.dstRepStride + j * c.dstPitch, c.width);
    }
  }
  return w;
}

/** Descriptors from a staging image of pieces [from, to) at `image` to their destinations (each piece contiguous there). */
export function stagedBatch(s: PieceSet, image: number, from: number, to: number): DescriptorWriter {
  const w = new DescriptorWriter(to - from);
  const bytes = s.copy.bytes;
  const { count, dst } = pieceAddresses(s, from, to);
  for (let j = 0; j < count; j++) w.pushMerged(image + j * bytes, dst[j]!, bytes);
  return w;
}

/**
 * Descriptors writing pieces [from, to), each one contiguous range in the source, straight
 * from the source pages into a packed image at `image` on the other side (the ring route
 * when the slices need no gathering: whole source pages the decode interleaves).
 */
export function packedBatch(s: PieceSet, image: number, from: number, to: number): DescriptorWriter {
  const w = new DescriptorWriter(to - from);
  const c = s.copy;
  forPieces(s, from, to, (i, src) => w.pushMerged(src + c.srcOffset, image + (i - from) * c.bytes, c.bytes));
  return w;
}

/**
 * One request per piece and rep as the transport moves it: `rows` rows of `width` bytes,
 * `srcPitch` apart at the source and `dstPitch` apart at the destination. The copy's own
 * order (destination address order, which a staging image needs) is kept, or, where the
 * destination is strided anyway, its rows and reps swap when that gives longer requests
 * (HND → NHD: a head's tokens rather than a token's heads).
 */
export type RowShape = Pick<SliceCopy, 'width' | 'rows' | 'srcPitch' | 'dstPitch' | 'reps' | 'srcRepStride' | 'dstRepStride'>;

export function rowShape(c: SliceCopy): RowShape {
  const asIs = {
    width: c.width,
    rows: c.rows,
    srcPitch: c.srcPitch,
    dstPitch: c.dstPitch,
    reps: c.reps,
    srcRepStride: c.srcRepStride,
    dstRepStride: c.dstRepStride,
  };
  if (c.dstContiguous || c.reps <= c.rows) return asIs; // a packed destination keeps its order
  return { width: c.width, rows: c.reps, srcPitch: c.srcRepStride, dstPitch: c.dstRepStride, reps: c.rows, srcRepStride: c.srcPitch, dstRepStride: c.dstPitch };
}

/**
 * Writes of pieces [from, to) straight from the source pages to the destination pages, the
 * transport moving the rows (routes 'gather' and 'ring' on a transport that gathers or
 * scatters rows): a request per piece and rep (rowShape), with `localRows` where the source
 * rows are strided and `remoteRows` where the destination's are. A piece whose rows
 * continue the previous request's at both ends (the next source page, landing right after
 * it) extends that request instead.
 */
export function stridedBatch(s: PieceSet, from = 0, to = pieceCount(s)): TransferBatch {
  const c = rowShape(s.copy);
  const cap = (to - from) * c.reps;
  const local = new Float64Array(cap);
  const remote = new Float64Array(cap);
  const rows = new Uint32Array(cap);
  let n = 0;
  forPieces(s, from, to, (_i, src, dst) => {
    for (let r = 0; r < c.reps; r++) {
      const l = src + s.copy.srcOffset + r * c.srcRepStride;
      const d = dst + r * c.dstRepStride;
      const k = n - 1;
      if (k >= 0 && l === local[k]! + rows[k]! * c.srcPitch && d === remote[k]! + rows[k]! * c.dstPitch && rows[k]! + c.rows <= MAX_REQUEST_ROWS) {
        rows[k] += c.rows;
        continue;
      }
      local[n] = l;
      remote[n] = d;
      rows[n++] = c.rows;
    }
  });
  const batch: TransferBatch = allocateBatch(n);
  batch.opcodes.fill(OP_WRITE);
  for (let k = 0; k < n; k++) {
    batch.localAddrs[k] = BigInt(local[k]!);
    batch.remoteAddrs[k] = BigInt(remote[k]!);
    batch.lengths[k] = BigInt(rows[k]! * c.width);
  }
  if (c.srcPitch !== c.width) {
    batch.localRows = rows.slice(0, n);
    batch.localPitches = new BigUint64Array(n).fill(BigInt(c.srcPitch));
  }
  if (c.dstPitch !== c.width) {
    batch.remoteRows = rows.slice(0, n);
    batch.remotePitches = new BigUint64Array(n).fill(BigInt(c.dstPitch));
  }
  return batch;
}

/**
 * Direct pieces (one range each way) as few requests as the transport allows: pieces that
 * continue each other on both sides merge as in directBatch, and a run of equal pieces
 * whose sources advance by one stride while their destinations follow one another (HND
 * head slices of consecutive pages landing in a run of destination pages) becomes one
 * request of rows the transport gathers (`localRows`). Rows stay within one buffer pair (one
 * registered source buffer: the transport checks a request's whole span). `gathers` false:
 * directBatch's requests exactly. A run of rows spans at most MAX_REQUEST_ROWS rows and MAX_ROWS_BYTES bytes.
 */
export function pageRowsBatch(s: PieceSet, gathers: boolean, from = 0, to = pieceCount(s)): TransferBatch {
  const cap = to - from;
  const local = new Float64Array(cap);
  const remote = new Float64Array(cap);
  const width = new Float64Array(cap);
  const pitch = new Float64Array(cap);
  const rows = new Uint32Array(cap);
  const pairOf = new Int32Array(cap);
  const c = s.copy;
  let n = 0;
  forPieces(s, from, to, (_i, src, dst, p) => {
    const l = src + c.srcOffset;
    const b = c.bytes;
    const k = n - 1;
    if (k >= 0) {
      const w = width[k]!;
      if (rows[k] === 1 && l === local[k]! + w && dst === remote[k]! + w) {
        width[k] = w + b; // continues it on both sides: one wider range
        return;
      }
      const stride = rows[k] === 1 ? l - local[k]! : pitch[k]!;
      const inRow = rows[k] === 1 || l === local[k]! + rows[k]! * stride;
      if (
        gathers &&
        p === pairOf[k] &&
        b === w &&
        stride > w &&
        inRow &&
        dst === remote[k]! + rows[k]! * w &&
        rows[k]! < MAX_REQUEST_ROWS &&
        (rows[k]! + 1) * w <= MAX_ROWS_BYTES
      ) {
        pitch[k] = stride;
        rows[k]! += 1;
        return;
      }
    }
    local[n] = l;
    remote[n] = dst;
    width[n] = b;
    pitch[n] = b;
    pairOf[n] = p;
    rows[n++] = 1;
  });
  const batch: TransferBatch = allocateBatch(n);
  batch.opcodes.fill(OP_WRITE);
  let gathered = false;
  for (let k = 0; k < n; k++) {
    batch.localAddrs[k] = BigInt(local[k]!);
    batch.remoteAddrs[k] = BigInt(remote[k]!);
    batch.lengths[k] = BigInt(rows[k]! * width[k]!);
    gathered ||= rows[k]! > 1;
  }
  if (gathered) {
    batch.localRows = rows.slice(0, n);
    batch.localPitches = BigUint64Array.from(pitch.subarray(0, n), (p) => BigInt(p));
  }
  return batch;
}

/** Bytes of one request of gathered page rows at most (a few MiB: the transport spreads its slices over the lanes). */
const MAX_ROWS_BYTES = 4 << 20;

/** Rows of one merged request at most (a request stays a few MiB: slices spread it over the lanes). */
const MAX_REQUEST_ROWS = 8192;

/** Appends copies as the staging copier takes them (9 numbers each). */
export interface CopySink {
  push(
    src: number,
    dst: number,
    width: number,
    rows: number,
    srcPitch: number,
    dstPitch: number,
    reps: number,
    srcRepStride: number,
    dstRepStride: number,
  ): void;
}

/**
 * Gathers pieces [from, to) into a packed image at `image`. `srcDelta[b]` converts an
 * address of source buffer b to the address the copier reads (0 unless a JS transport
 * names JS memory by addresses of its own).
 */
export function gatherCopies(s: PieceSet, sink: CopySink, image: number, from: number, to: number, srcDelta: Float64Array): void {
  const c = s.copy;
  const { count, src, pair } = pieceAddresses(s, from, to);
  for (let j = 0; j < count; j++)
    sink.push(
      src[j]! + c.srcOffset + srcDelta[s.pairs[2 * pair[j]!]!]!,
      image + j * c.bytes,
      c.width,
      c.rows,
      c.srcPitch,
      c.width,
      c.reps,
      c.srcRepStride,
      c.width * c.rows,
    );
}

/** Scatters a packed image of pieces [from, to) at `image` into their destinations (the decode side of the ring route). */
export function scatterCopies(s: PieceSet, sink: CopySink, image: number, from: number, to: number, dstDelta: Float64Array): void {
  const c = s.copy;
  forPieces(s, from, to, (i, _src, dst, p) => {
    sink.push(
      image + (i - from) * c.bytes,
      dst + dstDelta[s.pairs[2 * p + 1]!]!,
      c.width,
      c.rows,
      c.width,
      c.dstPitch,
      c.reps,
      c.width * c.rows,
      c.dstRepStride,
    );
  });
}
