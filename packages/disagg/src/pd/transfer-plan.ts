import { TransferError, type KVBuffers, type ParallelLayout } from '@te/connector';
import { identityPairs, kvBufferPairs, planCopy, shardOfRank, type BufferTable, type CopyPlan, type LayerSpan } from '../plan/index.js';
import type { RequestMessage } from '../protocol/messages.js';
import type { Destination } from './destination.js';

/** This prefill rank's side of a transfer: its buffers as numbers and its layer span. */
export interface SourceSide {
  buffers: KVBuffers;
  layout: ParallelLayout;
  kv: BufferTable;
  aux: BufferTable;
  state: BufferTable | undefined;
  span: LayerSpan;
}

/**
 * KV heads a rank holds: its shard of the model's heads when known, else what it declared
 * (1 when neither); MLA pages are one "head" wide.
 */
export function kvHeadsOf(
  attention: 'mha' | 'mla',
  tpSize: number,
  tpRank: number,
  totalKvHeads: number | undefined,
  kvHeadsPerRank: number | undefined,
): number {
  if (attention === 'mla') return 1;
  if (totalKvHeads !== undefined) return shardOfRank(totalKvHeads, tpSize, tpRank).count;
  return kvHeadsPerRank ?? 1;
}

function headsPerRank(src: SourceSide): number {
  return kvHeadsOf(src.buffers.attention, src.layout.attnTpSize, src.layout.attnTpRank, src.buffers.totalKvHeads, src.buffers.kvHeadsPerRank);
}

function destHeads(dest: Destination): number {
  const m = dest.msg;
  return kvHeadsOf(m.attention, m.tpSize, m.tpRank, m.totalKvHeads, m.kvHeadsPerRank);
}

/** The KV of `srcPages` into `dstPages`, for the given absolute layers (default: all of this stage). */
export function planKv(
  src: SourceSide,
  dest: Destination,
  req: RequestMessage,
  srcPages: Uint32Array,
  dstPages: Uint32Array,
  layers?: ArrayLike<number>,
): CopyPlan {
  const pairs = kvBufferPairs(src.buffers.attention, src.span, dest.span, layers);
  const input = { src: src.kv, dst: dest.kv, bufferPairs: pairs, srcItems: srcPages, dstItems: dstPages };
  if (!req.kvSlice) return planCopy(input);
  const slice = { rows: src.buffers.pageSize, srcUnits: headsPerRank(src), dstUnits: destHeads(dest), ...req.kvSlice };
  return planCopy({ ...input, slice });
}

export function planAux(src: SourceSide, dest: Destination, srcSlot: number, dstSlot: number): CopyPlan {
  if (src.aux.addrs.length !== dest.aux.addrs.length)
    throw new TransferError('LAYOUT_MISMATCH', `aux buffers differ: decode has ${dest.aux.addrs.length}, prefill has ${src.aux.addrs.length}`);
  return planCopy({
    src: src.aux,
    dst: dest.aux,
    bufferPairs: identityPairs(src.aux.addrs.length),
    srcItems: Uint32Array.of(srcSlot),
    dstItems: Uint32Array.of(dstSlot),
  });
}

/** State buffers pair by layer when there is one per layer (PP-aware), else one to one. */
export function statePairs(src: SourceSide, dest: Destination): Int32Array {
  const s = src.state!;
  const d = dest.state!;
  if (s.addrs.length === src.span.layers && d.addrs.length === dest.span.layers) {
    const out: number[] = [];
    for (let i = 0; i < src.span.layers; i++) {
      const di = src.span.firstLayer + i - dest.span.firstLayer;
      if (di < 0 || di >= dest.span.layers) throw new TransferError('LAYOUT_MISMATCH', `state of layer ${src.span.firstLayer + i} has no buffer on the decode`);
      out.push(i, di);
    }
    return Int32Array.from(out);
  }
  if (s.addrs.length !== d.addrs.length || src.layout.ppSize > 1)
    throw new TransferError('LAYOUT_MISMATCH', `state buffers differ: decode has ${d.addrs.length}, prefill has ${s.addrs.length}`);
  return identityPairs(s.addrs.length);
}

/** The state of `srcIndices` into the decode's slots; `only` limits it to the given source state buffers (layerwise). */
export function planState(src: SourceSide, dest: Destination, req: RequestMessage, srcIndices: Uint32Array, only?: ReadonlySet<number>): CopyPlan | undefined {
  if (!src.state || !dest.state || !req.sendsState) return undefined;
  const dstIndices = req.stateIndices ?? new Uint32Array(0);
  if (srcIndices.length !== dstIndices.length)
    throw new TransferError('INVALID_ARGUMENT', `room ${req.room}: ${srcIndices.length} source state indices but the decode sent ${dstIndices.length}`);
  let pairs = statePairs(src, dest);
  if (only) pairs = Int32Array.from([...pairs].filter((_, i, a) => (i % 2 === 0 ? only.has(a[i]!) : only.has(a[i - 1]!))));
  const input = { src: src.state, dst: dest.state, bufferPairs: pairs, srcItems: srcIndices, dstItems: dstIndices };
  if (!req.stateSlice) return planCopy(input);
  const total = src.buffers.state!.totalUnits!;
  const slice = {
    rows: 1,
    srcUnits: shardOfRank(total, src.layout.attnTpSize, src.layout.attnTpRank).count,
    dstUnits: shardOfRank(total, dest.msg.tpSize, dest.msg.tpRank).count,
    ...req.stateSlice,
  };
  return planCopy({ ...input, slice });
}
