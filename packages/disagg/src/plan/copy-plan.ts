import type { TransferBatch } from '@te/connector';
import { mergePageRuns } from './page-runs.js';
import { DescriptorWriter } from './descriptor-writer.js';

/** One side's buffers as numbers: base address, byte length and item (page or slot) length each. */
export interface BufferTable {
  readonly addrs: Float64Array;
  readonly lengths: Float64Array;
  readonly itemLens: Float64Array;
}

/**
 * Copies part of every item instead of whole items: each item holds `rows` rows (tokens of
 * a page; 1 for a state slot) of `srcUnits` / `dstUnits` sharded units (heads) each, and
 * `count` units are copied from unit `srcOffset` of a source row to unit `dstOffset` of the
 * destination row.
 */
export interface UnitSlice {
  rows: number;
  srcUnits: number;
  dstUnits: number;
  srcOffset: number;
  dstOffset: number;
  count: number;
}

export interface CopyPlanInput {
  src: BufferTable;
  dst: BufferTable;
  /** Pairs `[srcBuffer, dstBuffer, ...]`: which source buffer fills which destination buffer. */
  bufferPairs: Int32Array;
  /** Items to copy: source item `srcItems[i]` into destination item `dstItems[i]`. */
  srcItems: Uint32Array;
  dstItems: Uint32Array;
  /** Absent: whole items (item lengths must match). */
  slice?: UnitSlice;
}

export interface CopyPlan {
  batch: TransferBatch;
  /** Descriptors without merging: one per item (or per row when sliced) per buffer pair. */
  descriptorsBefore: number;
  bytes: number;
}

function checkItems(table: BufferTable, buffer: number, items: Uint32Array, side: string): void {
  const capacity = Math.floor(table.lengths[buffer]! / table.itemLens[buffer]!);
  for (let i = 0; i < items.length; i++) {
    if (items[i]! >= capacity) throw new RangeError(`${side} item ${items[i]} is outside buffer ${buffer} (${capacity} items)`);
  }
}

/** Plans the write batch for one source → destination pairing; pure, typed arrays only. */
export function planCopy(input: CopyPlanInput): CopyPlan {
  const { src, dst, bufferPairs, srcItems, dstItems, slice } = input;
  if (srcItems.length !== dstItems.length) throw new RangeError(`${srcItems.length} source items but ${dstItems.length} destination items`);
  const pairs = bufferPairs.length / 2;
  for (let p = 0; p < pairs; p++) {
    const sb = bufferPairs[2 * p]!;
    const db = bufferPairs[2 * p + 1]!;
    if (sb < 0 || sb >= src.addrs.length) throw new RangeError(`source buffer ${sb} does not exist (${src.addrs.length} buffers)`);
    if (db < 0 || db >= dst.addrs.length) throw new RangeError(`destination buffer ${db} does not exist (${dst.addrs.length} buffers)`);
    checkItems(src, sb, srcItems, 'source');
    checkItems(dst, db, dstItems, 'destination');
    if (!slice && src.itemLens[sb] !== dst.itemLens[db]) {
      throw new RangeError(
        `item lengths differ (source buffer ${sb}: ${src.itemLens[sb]} bytes, destination buffer ${db}: ${dst.itemLens[db]} bytes) and no slice was planned`,
      );
    }
  }
  return slice ? planSliced(input, slice, pairs) : planWhole(input, pairs);
}

function planWhole({ src, dst, bufferPairs, srcItems, dstItems }: CopyPlanInput, pairs: number): CopyPlan {
  const runs = mergePageRuns(srcItems, dstItems);
  const w = new DescriptorWriter(runs.count * pairs);
  for (let p = 0; p < pairs; p++) {
    const sb = bufferPairs[2 * p]!;
    const db = bufferPairs[2 * p + 1]!;
    const item = src.itemLens[sb]!;
    const sBase = src.addrs[sb]!;
    const dBase = dst.addrs[db]!;
    for (let r = 0; r < runs.count; r++) w.push(sBase + runs.src[r]! * item, dBase + runs.dst[r]! * item, runs.len[r]! * item);
  }
  return { batch: w.finish(), descriptorsBefore: srcItems.length * pairs, bytes: w.bytes };
}

function planSliced({ src, dst, bufferPairs, srcItems, dstItems }: CopyPlanInput, s: UnitSlice, pairs: number): CopyPlan {
  if (s.count === 0 || srcItems.length === 0) return { batch: new DescriptorWriter(0).finish(), descriptorsBefore: 0, bytes: 0 };
  if (s.srcOffset + s.count > s.srcUnits || s.dstOffset + s.count > s.dstUnits) {
    throw new RangeError(
      `unit slice [${s.srcOffset}+${s.count}) / [${s.dstOffset}+${s.count}) exceeds ${s.srcUnits} source / ${s.dstUnits} destination units per row`,
    );
  }
  const n = srcItems.length;
  const w = new DescriptorWriter(n * s.rows * pairs);
  for (let p = 0; p < pairs; p++) {
    const sb = bufferPairs[2 * p]!;
    const db = bufferPairs[2 * p + 1]!;
    const sItem = src.itemLens[sb]!;
    const dItem = dst.itemLens[db]!;
    const sRow = sItem / s.rows;
    const dRow = dItem / s.rows;
    const unitBytes = dRow / s.dstUnits;
    if (!Number.isInteger(sRow) || !Number.isInteger(dRow) || !Number.isInteger(unitBytes) || sRow !== unitBytes * s.srcUnits) {
      throw new RangeError(
        `buffers ${sb}→${db}: items of ${sItem} and ${dItem} bytes do not split into ${s.rows} rows of ${s.srcUnits} and ${s.dstUnits} equal units`,
      );
    }
    const len = s.count * unitBytes;
    const sOff = s.srcOffset * unitBytes;
    const dOff = s.dstOffset * unitBytes;
    const sBase = src.addrs[sb]! + sOff;
    const dBase = dst.addrs[db]! + dOff;
    const from = w.count;
    for (let i = 0; i < n; i++) w.pushStrided(sBase + srcItems[i]! * sItem, dBase + dstItems[i]! * dItem, sRow, dRow, s.rows);
    w.fillLengths(len, from, w.count);
  }
  return { batch: w.finish(), descriptorsBefore: n * s.rows * pairs, bytes: w.bytes };
}
