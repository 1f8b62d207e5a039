import { TransferError, type KVBuffers, type TransferEngine } from '@te/connector';
import { kvBufferPairs } from '../plan/index.js';
import type { StatusMessage } from '../protocol/messages.js';
import { checkPages, crc32 } from './kv-checksum.js';

/** Host views of a decode rank's KV buffers, taken once per rank. */
const viewsByBuffers = new WeakMap<KVBuffers, (Uint8Array | undefined)[]>();

function kvViews(engine: TransferEngine, buffers: KVBuffers): (Uint8Array | undefined)[] {
  let v = viewsByBuffers.get(buffers);
  if (!v) {
    v = Array.from(buffers.kv.addrs, (addr, i) => engine.hostView(addr, buffers.kv.lengths[i]!));
    viewsByBuffers.set(buffers, v);
  }
  return v;
}

/**
 * Checks one prefill rank's Success report against what landed in this decode rank's pages
 * (`pages`, the room's destination pages in order) and aux slot; throws DATA_CORRUPTED
 * naming the layer and pages (or the aux buffer) that differ.
 */
export function checkReport(engine: TransferEngine, buffers: KVBuffers, room: bigint, pages: Uint32Array, auxIndex: number, m: StatusMessage): void {
  if (m.checksums && m.checksumLayers) {
    const decodeSpan = { firstLayer: buffers.firstLayer ?? 0, layers: buffers.numLayers };
    let pairs: Int32Array;
    try {
      pairs = kvBufferPairs(buffers.attention, { firstLayer: m.checksumLayers.first, layers: m.checksumLayers.count }, decodeSpan);
    } catch (e) {
      throw new TransferError('PROTOCOL_MISMATCH', `room ${room}: checksums for layers this decode rank does not hold: ${(e as Error).message}`, { details: { room } });
    }
    const dst = Array.from({ length: pairs.length / 2 }, (_, i) => pairs[2 * i + 1]!);
    const perLayer = buffers.attention === 'mha' ? 2 : 1;
    const nameOf = (b: number): string => {
      const local = perLayer === 2 && b >= buffers.numLayers ? b - buffers.numLayers : b;
      return `layer ${decodeSpan.firstLayer + local}${perLayer === 2 ? (b >= buffers.numLayers ? ' V' : ' K') : ''}`;
    };
    checkPages(room, kvViews(engine, buffers), Number(buffers.kv.itemLengths[0]!), pages, dst, m.checksums, nameOf);
  }
  if (m.auxChecksums) {
    const aux = buffers.aux;
    if (m.auxChecksums.length !== aux.addrs.length) throw new TransferError('PROTOCOL_MISMATCH', `room ${room}: ${m.auxChecksums.length} aux checksums for ${aux.addrs.length} aux buffers`, { details: { room } });
    for (let i = 0; i < aux.addrs.length; i++) {
      const item = aux.itemLengths[i]!;
      const view = engine.hostView(aux.addrs[i]! + BigInt(auxIndex) * item, item);
      if (view && crc32(view) !== m.auxChecksums[i]) throw new TransferError('DATA_CORRUPTED', `room ${room}: aux checksum mismatch in aux buffer ${i}, slot ${auxIndex}`, { details: { room, aux: i, slot: auxIndex } });
    }
  }
}
