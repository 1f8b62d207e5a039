import { TransferError, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { ChecksumList } from '@te/staging';
import { kvBufferPairs, shardOfRank, type HeadSlice, type PageGeometry, type ShardSlice, type SliceCopy } from '../plan/index.js';
import { tableOf } from './local-buffers.js';
import type { StatusMessage, SumsMessage } from '../protocol/messages.js';
import { HostTable, corrupted, landedCopy, listed, pushLanded, runChecksums } from './kv-checksum.js';

/** A decode rank's buffers as the checksummer reads them, made once per rank. */
interface DecodeHost {
  kv: HostTable;
  aux: HostTable;
  state: HostTable | undefined;
}

const hosts = new WeakMap<KVBuffers, DecodeHost>();

function hostOf(engine: TransferEngine, buffers: KVBuffers): DecodeHost {
  let h = hosts.get(buffers);
  if (!h) {
    h = {
      kv: new HostTable(engine, tableOf(buffers.kv, 'KV')),
      aux: new HostTable(engine, tableOf(buffers.aux, 'aux')),
      state: buffers.state ? new HostTable(engine, tableOf(buffers.state, 'state')) : undefined,
    };
    hosts.set(buffers, h);
  }
  return h;
}

/** What the decode knows of the room and of the reporting prefill rank. */
export interface ReportContext {
  /** The room's destination pages, aux slot and state slots, as given to init. */
  pages: Uint32Array;
  auxIndex: number;
  stateIndices?: Uint32Array | undefined;
  /** Tokens per prefill page. */
  prefillPageSize: number;
  /** The head slice the rank sends here (undefined: every head of this rank). */
  kvSlice?: HeadSlice | undefined;
  /** The state units it sends here (undefined: whole slots). */
  stateSlice?: ShardSlice | undefined;
  /** This rank's page geometry of KV buffer `b`. */
  geometry(b: number): PageGeometry;
  layout: ParallelLayout;
}

function protocol(room: bigint, message: string): TransferError {
  return new TransferError('PROTOCOL_MISMATCH', `room ${room}: ${message}`, { details: { room } });
}

/**
 * Checks one prefill rank's Success report against what landed in this decode rank's pages,
 * state slots and aux slot (see kv-checksum.ts), on the checksummer's threads; rejects with
 * DATA_CORRUPTED naming the layer and destination pages (or the state buffer and slots, or
 * the aux buffer) that differ.
 */
export async function checkReport(
  engine: TransferEngine,
  buffers: KVBuffers,
  room: bigint,
  ctx: ReportContext,
  m: StatusMessage,
  checkedKv?: CheckedPage,
): Promise<void> {
  const host = hostOf(engine, buffers);
  const checks: Promise<unknown>[] = [];
  if (m.kvCrc32c && m.checksumLayers && host.kv.host)
    checks.push(checkKv(host.kv, buffers, room, ctx, m.kvCrc32c, m.checksumLayers, { firstPage: 0, ...(checkedKv ? { checked: checkedKv } : {}) }));
  if (m.stateCrc32c && host.state?.host) checks.push(checkState(host.state, buffers, room, ctx, m.stateCrc32c, m.stateBuffers));
  if (m.auxCrc32c && host.aux.host) checks.push(checkAux(host.aux, room, ctx.auxIndex, m.auxCrc32c));
  const results = await Promise.allSettled(checks);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/** Whether room page `k` was checked already against the checksums `row` (one per layer buffer). */
export type CheckedPage = (k: number, row: Uint32Array) => boolean;

/**
 * Checks a chunk a prefill rank reported written before its Success (SumsSchema): the
 * pages [firstPage, firstPage + n) of the room, as checkReport checks KV. Resolves with
 * the checksums per page (its layer buffers; 0: not read, this rank's KV is not host memory).
 */
export function checkChunk(engine: TransferEngine, buffers: KVBuffers, room: bigint, ctx: ReportContext, m: SumsMessage): Promise<number> {
  const host = hostOf(engine, buffers);
  if (!host.kv.host) return Promise.resolve(0);
  return checkKv(host.kv, buffers, room, ctx, m.kvCrc32c, m.checksumLayers, { firstPage: m.firstPage });
}

/**
 * KV pieces of room pages [part.firstPage, part.firstPage + n), `sums` page-major; pages
 * `part.checked` says were checked already against the same sums are not read again.
 * Resolves with the checksums per page.
 */
async function checkKv(
  host: HostTable,
  buffers: KVBuffers,
  room: bigint,
  ctx: ReportContext,
  sums: Uint32Array,
  layers: { first: number; count: number },
  part: { firstPage: number; checked?: CheckedPage },
): Promise<number> {
  const decodeSpan = { firstLayer: buffers.firstLayer ?? 0, layers: buffers.numLayers };
  let pairs: Int32Array;
  try {
    pairs = kvBufferPairs(buffers.attention, { firstLayer: layers.first, layers: layers.count }, decodeSpan);
  } catch (e) {
    throw protocol(room, `checksums for layers this decode rank does not hold: ${(e as Error).message}`);
  }
  const columns = pairs.length / 2;
  if (columns === 0 || sums.length % columns !== 0) throw protocol(room, `${sums.length} KV checksums for ${columns} layer buffers`);
  const n = sums.length / columns;
  const end = part.firstPage + n;
  const perDst = ctx.geometry(0).tokens / ctx.prefillPageSize;
  if (!Number.isInteger(perDst) || Math.ceil(end / perDst) > ctx.pages.length)
    throw protocol(room, `KV checksums for ${end} prefill pages; ${ctx.pages.length} destination pages of ${perDst} prefill pages were given`);
  const copies: SliceCopy[] = [];
  try {
    for (let b = 0; b < columns; b++) {
      const dst = ctx.geometry(pairs[2 * b + 1]!);
      copies.push(landedCopy(dst, ctx.prefillPageSize, ctx.kvSlice ?? { srcOffset: 0, dstOffset: 0, count: dst.heads }));
    }
  } catch (e) {
    if (e instanceof RangeError) throw protocol(room, `KV checksums for pieces this decode rank cannot plan: ${e.message}`);
    throw e;
  }
  const list = new ChecksumList(sums.length);
  // The room pages read (those not checked before), in list order.
  const read: number[] = [];
  for (let k = part.firstPage; k < end; k++) {
    const at = (k - part.firstPage) * columns;
    if (part.checked?.(k, sums.subarray(at, at + columns))) continue;
    read.push(k);
    const page = ctx.pages[Math.floor(k / perDst)]!;
    for (let b = 0; b < columns; b++) pushLanded(list, copies[b]!, host.item(pairs[2 * b + 1]!, page), k % perDst);
  }
  const got = await runChecksums(host.regions(), list);
  const bad = new Map<number, number[]>();
  for (let i = 0; i < got.length; i++) {
    const k = read[Math.floor(i / columns)]!;
    if (got[i] === sums[(k - part.firstPage) * columns + (i % columns)]) continue;
    const buffer = pairs[2 * (i % columns) + 1]!;
    const page = ctx.pages[Math.floor(k / perDst)]!;
    const pages = bad.get(buffer) ?? [];
    if (pages[pages.length - 1] !== page) pages.push(page);
    bad.set(buffer, pages);
  }
  if (bad.size === 0) return columns;
  const perLayer = buffers.attention === 'mha' ? 2 : 1;
  const nameOf = (b: number): string => {
    const local = perLayer === 2 && b >= buffers.numLayers ? b - buffers.numLayers : b;
    return `layer ${decodeSpan.firstLayer + local}${perLayer === 2 ? (b >= buffers.numLayers ? ' V' : ' K') : ''}`;
  };
  const [buffer, pages] = [...bad][0]!;
  const layer = decodeSpan.firstLayer + (perLayer === 2 && buffer >= buffers.numLayers ? buffer - buffers.numLayers : buffer);
  throw corrupted(
    room,
    `KV checksum mismatch in ${nameOf(buffer)}, destination pages ${listed(pages)}${bad.size > 1 ? `, and ${bad.size - 1} more buffers` : ''}`,
    { buffer, layer, pages: pages.slice(0, 64) },
  );
}

async function checkState(
  host: HostTable,
  buffers: KVBuffers,
  room: bigint,
  ctx: ReportContext,
  sums: Uint32Array,
  stateBuffers: Uint32Array | undefined,
): Promise<void> {
  const slots = ctx.stateIndices;
  const state = host.table;
  if (!slots || !stateBuffers || stateBuffers.length * slots.length !== sums.length)
    throw protocol(room, `${sums.length} state checksums for ${stateBuffers?.length ?? 0} state buffers × ${slots?.length ?? 0} slots`);
  const slice = ctx.stateSlice;
  const units = slice ? shardOfRank(buffers.state!.totalUnits ?? 0, ctx.layout.attnTpSize, ctx.layout.attnTpRank).count : 1;
  const list = new ChecksumList(sums.length);
  for (const b of stateBuffers) {
    if (b >= state.addrs.length) throw protocol(room, `state checksums for state buffer ${b}; this rank has ${state.addrs.length}`);
    const item = state.itemLens[b]!;
    const unit = item / units;
    for (const slot of slots) list.push(host.item(b, slot) + (slice ? slice.dstOffset * unit : 0), slice ? slice.count * unit : item);
  }
  const got = await runChecksums(host.regions(), list);
  for (let p = 0; p < stateBuffers.length; p++) {
    const bad: number[] = [];
    for (let i = 0; i < slots.length; i++) if (got[p * slots.length + i] !== sums[p * slots.length + i]) bad.push(slots[i]!);
    if (bad.length > 0)
      throw corrupted(room, `state checksum mismatch in state buffer ${stateBuffers[p]}, slots ${listed(bad)}`, {
        state: stateBuffers[p],
        slots: bad.slice(0, 64),
      });
  }
}

async function checkAux(host: HostTable, room: bigint, auxIndex: number, sums: Uint32Array): Promise<void> {
  const aux = host.table;
  if (sums.length !== aux.addrs.length) throw protocol(room, `${sums.length} aux checksums for ${aux.addrs.length} aux buffers`);
  const list = new ChecksumList(sums.length);
  for (let i = 0; i < aux.addrs.length; i++) list.push(host.item(i, auxIndex), aux.itemLens[i]!);
  const got = await runChecksums(host.regions(), list);
  for (let i = 0; i < got.length; i++)
    if (got[i] !== sums[i]) throw corrupted(room, `aux checksum mismatch in aux buffer ${i}, slot ${auxIndex}`, { aux: i, slot: auxIndex });
}
