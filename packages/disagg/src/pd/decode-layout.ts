import type { KVBuffers, ParallelLayout, TransferEngine } from '@te/connector';
import type { DecodeDescription } from '../bootstrap/directory.js';
import { PD_PROTOCOL_VERSION, type RegisterMessage } from '../protocol/messages.js';
import { wireOf } from './local-buffers.js';

/**
 * A decode rank's layout and buffers, described once: the registration every prefill rank
 * receives (and checks, see destination.ts), and the fields the bootstrap server compares
 * with the prefill layout, taken from it in SGLang's spelling.
 */
export interface DecodeLayout {
  readonly layout: ParallelLayout;
  readonly buffers: KVBuffers;
  /** What a prefill rank receives at registration; the staging ring is added once it exists. */
  readonly registration: RegisterMessage;
  /** What the bootstrap server compares with the prefill layout (refusing a mismatch). */
  readonly bootstrapFields: DecodeDescription;
}

export function describeDecode(engine: TransferEngine, layout: ParallelLayout, buffers: KVBuffers): DecodeLayout {
  const b = buffers;
  const registration: RegisterMessage = {
    v: PD_PROTOCOL_VERSION,
    decodeSegment: engine.segmentName,
    epoch: engine.epoch,
    tpSize: layout.attnTpSize,
    tpRank: layout.attnTpRank,
    ppSize: layout.ppSize,
    ppRank: layout.ppRank,
    attention: b.attention,
    pageSize: b.pageSize,
    kvCacheDtype: b.kvCacheDtype,
    firstLayer: b.firstLayer ?? 0,
    numLayers: b.numLayers,
    totalLayers: b.totalLayers ?? b.numLayers,
    kv: wireOf(b.kv),
    aux: wireOf(b.aux),
  };
  if (b.kvHeadsPerRank !== undefined) registration.kvHeadsPerRank = b.kvHeadsPerRank;
  if (b.totalKvHeads !== undefined) registration.totalKvHeads = b.totalKvHeads;
  if (b.pageLayout !== undefined) registration.pageLayout = b.pageLayout;
  if (b.state) {
    registration.state = { kind: b.state.kind, table: wireOf(b.state) };
    if (b.state.totalUnits !== undefined) registration.state.totalUnits = b.state.totalUnits;
  }
  return { layout, buffers, registration, bootstrapFields: bootstrapFieldsOf(registration) };
}

/** The registration's fields the bootstrap server checks, in its (SGLang's) names. */
function bootstrapFieldsOf(r: RegisterMessage): DecodeDescription {
  return { page_size: r.pageSize, kv_cache_dtype: r.kvCacheDtype, attention: r.attention, num_layers: r.totalLayers };
}
