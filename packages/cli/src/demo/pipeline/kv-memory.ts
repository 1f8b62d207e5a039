import type { KVBuffers, TransferEngine } from '@te/connector';
import { rowBytes, type ModelSpec } from './model.js';

/** The model facts a KV cache's shape depends on. */
export type KvShape = Pick<ModelSpec, 'layers' | 'pageSize' | 'heads' | 'headDim'>;

/** One worker's KV cache (MHA layout: K of every layer, then V) and aux slots, from the engine's allocator. */
export interface KvMemory {
  buffers: KVBuffers;
  /** View of KV buffer b (b < layers: K of layer b; else V of layer b - layers). */
  kv: Uint8Array[];
  aux: Uint8Array;
  itemBytes: number;
}

export const AUX_BYTES = 64;

export async function allocateKv(engine: TransferEngine, m: KvShape, pages: number, auxSlots: number): Promise<KvMemory> {
  const itemBytes = m.pageSize * rowBytes(m);
  const bufferBytes = itemBytes * pages;
  const mem = await engine.allocateMemory(2 * m.layers * bufferBytes + auxSlots * AUX_BYTES);
  const view = mem.buffer!;
  const kv = Array.from({ length: 2 * m.layers }, (_, b) => view.subarray(b * bufferBytes, (b + 1) * bufferBytes));
  const auxOffset = 2 * m.layers * bufferBytes;
  const addrs = BigUint64Array.from(kv.map((_, b) => mem.addr + BigInt(b * bufferBytes)));
  return {
    kv,
    aux: view.subarray(auxOffset, auxOffset + auxSlots * AUX_BYTES),
    itemBytes,
    buffers: {
      kv: { addrs, lengths: addrs.map(() => BigInt(bufferBytes)), itemLengths: addrs.map(() => BigInt(itemBytes)) },
      attention: 'mha',
      numLayers: m.layers,
      pageSize: m.pageSize,
      kvCacheDtype: 'bf16',
      kvHeadsPerRank: m.heads,
      headBytes: m.headDim * 2,
      aux: {
        addrs: BigUint64Array.of(mem.addr + BigInt(auxOffset)),
        lengths: BigUint64Array.of(BigInt(auxSlots * AUX_BYTES)),
        itemLengths: BigUint64Array.of(BigInt(AUX_BYTES)),
      },
      device: 'cpu',
    },
  };
}

/** Copies contiguous token rows into (or compares them with) the request's pages of one buffer. */
export function scatterRows(mem: KvMemory, buffer: number, pages: Uint32Array, rows: Uint8Array): void {
  const view = mem.kv[buffer]!;
  pages.forEach((page, i) => {
    const part = rows.subarray(i * mem.itemBytes, Math.min(rows.length, (i + 1) * mem.itemBytes));
    view.set(part, page * mem.itemBytes);
  });
}

/** The first byte where the pages differ from `rows`, or -1. */
export function compareRows(mem: KvMemory, buffer: number, pages: Uint32Array, rows: Uint8Array): number {
  const view = mem.kv[buffer]!;
  for (let i = 0; i < pages.length; i++) {
    const part = rows.subarray(i * mem.itemBytes, Math.min(rows.length, (i + 1) * mem.itemBytes));
    const got = view.subarray(pages[i]! * mem.itemBytes, pages[i]! * mem.itemBytes + part.length);
    if (Buffer.compare(got, part) !== 0) {
      for (let j = 0; j < part.length; j++) if (got[j] !== part[j]) return i * mem.itemBytes + j;
    }
  }
  return -1;
}
