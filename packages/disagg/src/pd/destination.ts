import { TransferError, checkSegmentName, type KVBuffers, type ParallelLayout } from '@te/connector';
import { shardOfRank, type BufferTable, type LayerSpan } from '../plan/index.js';
import type { RegisterMessage } from '../protocol/messages.js';
import { mismatchMessage, pairingMismatch, totalHeadsMismatch } from '../shared/pairing.js';
import { tableFromWire } from './local-buffers.js';

/** A decode rank as one prefill rank knows it: its layout and buffers, and whether it failed. */
export interface Destination {
  readonly segment: string;
  readonly epoch: bigint;
  readonly msg: RegisterMessage;
  readonly span: LayerSpan;
  readonly kv: BufferTable;
  readonly aux: BufferTable;
  readonly state: BufferTable | undefined;
  /** Set after a connection-level failure: later rooms fail fast until it registers again. */
  failed?: TransferError;
  /** Its decode stopped answering heartbeats: dropped once no room uses it. */
  lost?: boolean;
}

function mismatch(field: string, decode: unknown, prefill: unknown): never {
  throw new TransferError('LAYOUT_MISMATCH', mismatchMessage(field, decode, prefill));
}

/**
 * Checks a decode rank's registration against this prefill rank's layout, so a
 * mismatch is refused here, naming both values, instead of landing as corrupt KV.
 */
export function acceptDestination(msg: RegisterMessage, buffers: KVBuffers, layout: ParallelLayout): Destination {
  const totalLayers = buffers.totalLayers ?? buffers.numLayers;
  // The segment is where every write and status report goes, and part of the table key.
  checkSegmentName(msg.decodeSegment);
  if (msg.tpRank >= msg.tpSize || msg.ppRank >= msg.ppSize)
    throw new TransferError('INVALID_ARGUMENT', `decode rank tp ${msg.tpRank}/${msg.tpSize}, pp ${msg.ppRank}/${msg.ppSize}: a rank must be below its size`);
  // The rules the bootstrap server applied to this decode's query (shared/pairing.ts), again:
  // a registration comes from the peer itself, which may not have asked the server.
  const decode = { page_size: msg.pageSize, kv_cache_dtype: msg.kvCacheDtype, attention: msg.attention, num_layers: msg.totalLayers };
  const refused = pairingMismatch((field) => decode[field], {
    page_size: buffers.pageSize,
    kv_cache_dtype: buffers.kvCacheDtype,
    attention: buffers.attention,
    num_layers: totalLayers,
  });
  if (refused) throw new TransferError('LAYOUT_MISMATCH', refused);
  if (msg.ppSize !== 1 && msg.ppSize !== layout.ppSize) mismatch('pp_size', msg.ppSize, layout.ppSize);
  if (msg.firstLayer + msg.numLayers > totalLayers)
    throw new TransferError(
      'INVALID_ARGUMENT',
      `decode registers layers [${msg.firstLayer}, ${msg.firstLayer + msg.numLayers}), outside the model's ${totalLayers} layers`,
    );
  const perLayer = msg.attention === 'mha' ? 2 : 1;
  if (msg.kv.addrs.length !== msg.numLayers * perLayer)
    throw new TransferError('INVALID_ARGUMENT', `decode registers ${msg.kv.addrs.length} KV buffers for ${msg.numLayers} ${msg.attention} layers`);
  // Every table is kept (the message and its Float64 copies) as long as the registration:
  // bounded by what this prefill's layout can ever pair with (see transfer-plan.ts), so a
  // peer cannot park megabytes per registration.
  const auxCount = buffers.aux.addrs.length;
  if (msg.aux.addrs.length !== 0 && msg.aux.addrs.length !== auxCount)
    throw new TransferError('INVALID_ARGUMENT', `decode registers ${msg.aux.addrs.length} aux buffers; this prefill rank pairs 0 or ${auxCount}`);
  if (msg.attention === 'mha' && msg.tpSize !== layout.attnTpSize) {
    if (msg.totalKvHeads === undefined || buffers.totalKvHeads === undefined) {
      throw new TransferError(
        'LAYOUT_MISMATCH',
        `attention TP differs (decode ${msg.tpSize}, prefill ${layout.attnTpSize}): both sides must declare totalKvHeads for head slicing`,
      );
    }
    const heads = totalHeadsMismatch(msg.totalKvHeads, buffers.totalKvHeads);
    if (heads) throw new TransferError('LAYOUT_MISMATCH', heads);
    const want = shardOfRank(msg.totalKvHeads, msg.tpSize, msg.tpRank).count;
    if (msg.kvHeadsPerRank !== undefined && msg.kvHeadsPerRank !== want) mismatch('kv_heads_per_rank', msg.kvHeadsPerRank, want);
  }
  const srcLayout = buffers.pageLayout ?? 'NHD';
  const dstLayout = msg.pageLayout ?? 'NHD';
  if (msg.attention === 'mha' && srcLayout !== dstLayout && (msg.totalKvHeads ?? msg.kvHeadsPerRank) === undefined) {
    throw new TransferError(
      'LAYOUT_MISMATCH',
      `page_layout differs (decode ${dstLayout}, prefill ${srcLayout}): the decode must declare totalKvHeads or kvHeadsPerRank so heads can be re-laid out`,
    );
  }
  if (msg.attention === 'mha' && srcLayout !== dstLayout && buffers.totalKvHeads === undefined && buffers.kvHeadsPerRank === undefined) {
    throw new TransferError(
      'LAYOUT_MISMATCH',
      `page_layout differs (decode ${dstLayout}, prefill ${srcLayout}): this prefill rank must declare totalKvHeads or kvHeadsPerRank so heads can be re-laid out`,
    );
  }
  if (msg.pageSize !== buffers.pageSize && buffers.state?.kind === 'swa') mismatch('page_size (SWA state is page-indexed)', msg.pageSize, buffers.pageSize);
  if (Boolean(msg.state) !== Boolean(buffers.state)) mismatch('state', msg.state?.kind ?? 'none', buffers.state?.kind ?? 'none');
  if (msg.state && buffers.state && msg.state.kind !== buffers.state.kind) mismatch('state', msg.state.kind, buffers.state.kind);
  if (msg.state && buffers.state) {
    // State pairs one buffer per layer, or one to one with this rank's state buffers.
    const n = msg.state.table.addrs.length;
    if (n !== msg.numLayers && n !== buffers.state.addrs.length)
      throw new TransferError(
        'INVALID_ARGUMENT',
        `decode registers ${n} state buffers; this prefill rank pairs ${msg.numLayers} (one per layer) or ${buffers.state.addrs.length}`,
      );
  }
  return {
    segment: msg.decodeSegment,
    epoch: msg.epoch,
    msg,
    span: { firstLayer: msg.firstLayer, layers: msg.numLayers },
    kv: tableFromWire(msg.kv, 'decode KV'),
    aux: tableFromWire(msg.aux, 'decode aux'),
    state: msg.state ? tableFromWire(msg.state.table, 'decode state') : undefined,
  };
}
