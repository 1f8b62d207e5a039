import { NATIVE_STATUS, TransferError, isTransferError, type TransferBatch, type TransferEngine } from '@te/connector';
import { kvBufferPairs } from '../plan/index.js';
import type { PageGeometry } from '../plan/page-geometry.js';
import { planSliceCopy, routeOf, type HeadSlice, type SliceCopy, type SliceRoute } from '../plan/slice-copy.js';
import { checkPieces, directBatch, pageRowsBatch, rowShape, stridedBatch, type PieceSet } from '../plan/slice-pieces.js';
import type { RequestMessage } from '../protocol/messages.js';
import { RingAllocReplySchema, STAGING_MSG, type RingAllocMessage, type ScatterMessage } from '../protocol/staging-messages.js';
import { checkReply } from '../protocol/handle.js';
import { PD_PROTOCOL_VERSION } from '../protocol/messages.js';
import type { ResolvedStaging } from '../staging/options.js';
import type { RingTarget, Stager } from '../staging/stager.js';
import type { Destination } from './destination.js';
import { kvHeadsOf, planKv, type SourceSide } from './transfer-plan.js';

/** What the staging path did since the manager was created. */
export interface StagingStats {
  /** KV writes whose head slices the transport gathered from the pages itself (no staging copy; see `transportGather`). */
  transportGathers: number;
  /** KV writes whose head slices the transport wrote into the decode's pages' rows itself (no ring, no scatter; see `transportScatter`). */
  transportScatters: number;
  /** KV writes that went through staging: gathered here (and written whole), or staged on the decode's ring and scattered there. */
  gatherWrites: number;
  ringWrites: number;
  /** Bytes gathered into staging, and the time the copier took for them (copies run off the JS thread). */
  stagedBytes: number;
  gatherMs: number;
  /** Descriptors the staged writes submitted. */
  stagedDescriptors: number;
  /** Staging memory held now (by chunks being gathered or written). */
  inUse: number;
  /** Writes that needed staging but went the per-token way, by reason. */
  fallbacks: Record<string, number>;
  /** Scattered writes a decode's transport refused as unsupported (an earlier build): sent again through its ring. */
  scatterRefusals: number;
}

export interface KvStaging {
  options: ResolvedStaging;
  /** Why staging cannot run on this rank at all (device memory, no native copier), or undefined. */
  unavailable: string | undefined;
  /** The rank's stager, created on first use. */
  stager(): Promise<Stager>;
  /** A failed room's chunks waiting for staging memory give up. */
  refuse(room: bigint, error: TransferError): void;
  /** Decode segments whose transport refused a scattered write as unsupported: their slices take the ring from then on. */
  noScatter: Set<string>;
  stats: StagingStats;
  log(message: string): void;
}

/** One KV write of a room to one decode rank. */
export interface KvWrite {
  source: SourceSide;
  dest: Destination;
  req: RequestMessage;
  /** Source pages of this call and their index among the room's pages. */
  srcPages: Uint32Array;
  firstPage: number;
  /** Absolute layers (default: all of this stage). */
  layers?: ArrayLike<number>;
  room: bigint;
  prefillTpRank: number;
  prefillPpRank: number;
  engine: TransferEngine;
  timeoutMs: number;
  submit(batch: TransferBatch): Promise<void>;
  staging: KvStaging;
  /** Aborted when the room fails: staged chunks not yet written are not. */
  signal?: AbortSignal;
}

/** This side's and the destination's page geometry, and the head slice between them. */
export function geometries(
  source: SourceSide,
  dest: Destination,
  req: RequestMessage,
): { src: PageGeometry; dst: PageGeometry; slice: HeadSlice; perDst: number } {
  const b = source.buffers;
  const m = dest.msg;
  const srcHeads = kvHeadsOf(b.attention, source.layout.attnTpSize, source.layout.attnTpRank, b.totalKvHeads, b.kvHeadsPerRank);
  const dstHeads = kvHeadsOf(b.attention, m.tpSize, m.tpRank, m.totalKvHeads, m.kvHeadsPerRank);
  const slice = req.kvSlice ?? { srcOffset: 0, dstOffset: 0, count: srcHeads };
  const srcItem = source.kv.itemLens[0]!;
  const dstItem = dest.kv.itemLens[0]!;
  const src: PageGeometry = { tokens: b.pageSize, heads: srcHeads, headBytes: srcItem / (b.pageSize * srcHeads), layout: b.pageLayout ?? 'NHD' };
  const dst: PageGeometry = { tokens: m.pageSize, heads: dstHeads, headBytes: dstItem / (m.pageSize * dstHeads), layout: m.pageLayout ?? 'NHD' };
  return { src, dst, slice, perDst: m.pageSize / b.pageSize };
}

function uniform(t: Float64Array, buffers: Int32Array, side: 0 | 1): boolean {
  for (let i = side + 2; i < buffers.length; i += 2) if (t[buffers[i]!] !== t[buffers[side]!]) return false;
  return true;
}

/** Whether today's planner (equal pages, NHD both sides) serves this write as it always did. */
function classic(source: SourceSide, dest: Destination): boolean {
  return source.buffers.pageSize === dest.msg.pageSize && (source.buffers.pageLayout ?? 'NHD') === 'NHD' && (dest.msg.pageLayout ?? 'NHD') === 'NHD';
}

export interface KvPlan {
  set: PieceSet | undefined;
  route: SliceRoute | 'classic';
  copy: SliceCopy | undefined;
}

/** Plans a KV write: which route, and the pieces (refusing pages outside either side's buffers). */
export function planKvWrite(w: Pick<KvWrite, 'source' | 'dest' | 'req' | 'srcPages' | 'firstPage' | 'layers' | 'room'>): KvPlan {
  const { source, dest, req } = w;
  const pairs = kvBufferPairs(source.buffers.attention, source.span, dest.span, w.layers);
  const g = geometries(source, dest, req);
  const bad = (message: string): never => {
    throw new TransferError('INVALID_ARGUMENT', `room ${w.room}: ${message}`, { details: { room: w.room } });
  };
  if (!Number.isInteger(g.perDst) || g.perDst < 1)
    bad(`decode pages of ${dest.msg.pageSize} tokens are not a whole multiple of this rank's ${source.buffers.pageSize}`);
  let copy: SliceCopy;
  try {
    if (!uniform(source.kv.itemLens, pairs, 0) || !uniform(dest.kv.itemLens, pairs, 1)) throw new RangeError('KV buffers of different page sizes');
    copy = planSliceCopy(g.src, g.dst, g.slice);
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    if (classic(source, dest)) return { set: undefined, route: 'classic', copy: undefined };
    throw new TransferError('LAYOUT_MISMATCH', `room ${w.room}: cannot map this rank's pages onto decode ${dest.segment}: ${e.message}`, {
      details: { room: w.room },
    });
  }
  const set: PieceSet = { src: source.kv, dst: dest.kv, pairs, srcPages: w.srcPages, firstPage: w.firstPage, dstPages: req.pages, perDst: g.perDst, copy };
  try {
    checkPieces(set);
  } catch (e) {
    if (e instanceof RangeError) bad(e.message);
    throw e;
  }
  return { set, route: routeOf(copy), copy };
}

/** Today's planner (planKv), for writes it served before page layouts and page multiples existed. */
function classicBatch(w: KvWrite): TransferBatch {
  return planKv(w.source, w.dest, w.req, w.srcPages, w.req.pages.subarray(w.firstPage, w.firstPage + w.srcPages.length), w.layers).batch;
}

function fallback(w: KvWrite, reason: string): void {
  const s = w.staging.stats;
  s.fallbacks[reason] = (s.fallbacks[reason] ?? 0) + 1;
  w.staging.log(`room ${w.room}: KV to ${w.dest.segment} goes the per-token way (${reason})`);
}

function ringOf(w: KvWrite, set: PieceSet): RingTarget | undefined {
  const ring = w.dest.msg.ring;
  if (!ring) return undefined;
  const client = w.engine.controlClient(w.dest.segment);
  const head = { v: PD_PROTOCOL_VERSION, room: w.room, prefillTpRank: w.prefillTpRank, prefillPpRank: w.prefillPpRank } as const;
  const dstBuffers = Uint32Array.from({ length: set.pairs.length / 2 }, (_, i) => set.pairs[2 * i + 1]!);
  return {
    capacity: Number(ring.length),
    addr: Number(ring.addr),
    alloc: async (bytes) => {
      const msg: RingAllocMessage = { ...head, bytes };
      return checkReply(STAGING_MSG.ringAlloc, RingAllocReplySchema, await client.request(STAGING_MSG.ringAlloc, msg, w.timeoutMs)).offset;
    },
    scatter: async (offset, bytes, firstPiece, pieces) => {
      const msg: ScatterMessage = { ...head, offset, bytes, firstPage: set.firstPage, pageCount: set.srcPages.length, dstBuffers, firstPiece, pieces };
      await client.request(STAGING_MSG.scatter, msg, w.timeoutMs);
    },
  };
}

/** Smallest request worth moving as rows by the transport: below it, the staging copier packs the rows instead. */
const MIN_ROWS_WRITE = 4096;

/**
 * Whether the transport to this decode moves the slices' rows itself: staging enabled, the
 * route's option on (`transportGather` for slices gathered here, `transportScatter` for
 * slices the decode interleaves), requests of a useful size, and a transport that declares
 * `gatherWrites` / `scatterWrites`.
 */
async function transportMovesRows(w: KvWrite, set: PieceSet, route: SliceRoute | 'classic'): Promise<boolean> {
  const { options } = w.staging;
  const shape = rowShape(set.copy);
  if (!options.enabled || shape.width * shape.rows < MIN_ROWS_WRITE) return false;
  const src = BigInt(set.src.addrs[set.pairs[0]!]!);
  const dst = BigInt(set.dst.addrs[set.pairs[1]!]!);
  const gathers = shape.srcPitch !== shape.width;
  if (route === 'gather') return options.transportGather && (await w.engine.gathersWrites(w.dest.segment, src, dst));
  if (route !== 'ring' || !options.transportScatter || w.staging.noScatter.has(w.dest.segment)) return false;
  return (await w.engine.scattersWrites(w.dest.segment, src, dst)) && (!gathers || (await w.engine.gathersWrites(w.dest.segment, src, dst)));
}

/**
 * A direct write's requests. Where each piece is part of its source page (HND head slices),
 * consecutive pages' pieces stride evenly through the source while landing one after another
 * in a run of destination pages: a transport that gathers rows takes such a run as one
 * request (8 pages of the bench's runs: 8× fewer requests), else one request per piece.
 */
async function directRequests(w: KvWrite, set: PieceSet): Promise<TransferBatch> {
  const { options } = w.staging;
  const partial = set.copy.bytes < set.src.itemLens[set.pairs[0]!]!;
  if (!partial || !options.enabled || !options.transportGather || set.copy.bytes < MIN_ROWS_WRITE) return directBatch(set).finish();
  const src = BigInt(set.src.addrs[set.pairs[0]!]!);
  const dst = BigInt(set.dst.addrs[set.pairs[1]!]!);
  if (!(await w.engine.gathersWrites(w.dest.segment, src, dst))) return directBatch(set).finish();
  const batch = pageRowsBatch(set, true);
  if (batch.localRows) w.staging.stats.transportGathers++;
  return batch;
}

/**
 * The write as rows the transport moves itself; false when the decode's transport refused the
 * scattered rows as unsupported (an earlier build of the decode's transport, which sent
 * none of them): that decode's slices take the ring from then on.
 */
async function rowsMoved(w: KvWrite, set: PieceSet, route: SliceRoute | 'classic'): Promise<boolean> {
  const stats = w.staging.stats;
  try {
    await w.submit(stridedBatch(set));
  } catch (e) {
    if (route !== 'ring' || !refusedUnsent(e)) throw e;
    w.staging.noScatter.add(w.dest.segment);
    stats.scatterRefusals++;
    w.staging.log(`room ${w.room}: ${w.dest.segment} does not take scattered writes (${(e as Error).message}); its slices go through its ring`);
    return false;
  }
  if (route === 'gather') stats.transportGathers++;
  else stats.transportScatters++;
  return true;
}

/** Whether every request of a failed write was refused as an unsupported operation (so none of its bytes was sent). */
export function refusedUnsent(e: unknown): boolean {
  const statuses = isTransferError(e) ? (e.statuses ?? (isTransferError(e.cause) ? e.cause.statuses : undefined)) : undefined;
  return statuses !== undefined && statuses.every((s) => s === NATIVE_STATUS.UNSUPPORTED_OPERATION);
}

/**
 * Whether this write's bytes go through the transport alone, with no staging copy on either
 * side, so that the transport's verified writes cover them from the prefill's pages to the
 * decode's: whole pages and HND slices (direct), today's per-token planner (classic), and
 * slices the transport gathers itself. Slices the decode interleaves can fall back to its
 * ring in the middle of a room, and slices gathered in staging pass the copier: no.
 */
export async function movesOnlyThroughTransport(w: KvWrite): Promise<boolean> {
  const plan = planKvWrite(w);
  if (plan.route === 'classic' || plan.route === 'direct') return true;
  return plan.route === 'gather' && (await transportMovesRows(w, plan.set!, plan.route));
}

/**
 * Writes a room's KV pages to one decode rank by the best route the two layouts allow:
 * whole ranges straight from the pages, head slices gathered by the transport (or in staging) and written as
 * whole destination ranges, or (slices the decode must interleave) written into the
 * decode pages' rows by the transport (or staged on the decode's ring and scattered
 * there); without staging, row by row.
 */
export async function writeKv(w: KvWrite): Promise<void> {
  const plan = planKvWrite(w);
  if (plan.route === 'classic') return w.submit(classicBatch(w));
  const set = plan.set!;
  if (plan.route === 'direct') return w.submit(await directRequests(w, set));
  if ((await transportMovesRows(w, set, plan.route)) && (await rowsMoved(w, set, plan.route))) return;
  const why =
    w.staging.unavailable ??
    (!w.staging.options.enabled ? 'staging disabled' : plan.route === 'ring' && !w.dest.msg.ring ? 'the decode offers no staging ring' : undefined);
  if (why) {
    fallback(w, why);
    // Same pages, same layouts as before this path existed: today's planner is the faster per-token one.
    return w.submit(classic(w.source, w.dest) ? classicBatch(w) : directBatch(set).finish());
  }
  let stager: Stager;
  try {
    stager = await w.staging.stager();
  } catch (e) {
    // Staging memory could not be had (a transport's allocator too small, no memory): this write goes row by row.
    fallback(w, `no staging memory: ${(e as Error).message.split('\n')[0]}`);
    return w.submit(classic(w.source, w.dest) ? classicBatch(w) : directBatch(set).finish());
  }
  const ring = plan.route === 'ring' ? ringOf(w, set) : undefined;
  const done = await stager.write({
    set,
    submit: (b) => w.submit(b),
    owner: w.room,
    timeoutMs: w.timeoutMs,
    ...(ring ? { ring } : {}),
    ...(w.signal ? { signal: w.signal } : {}),
  });
  const s = w.staging.stats;
  s.gatherMs += done.gatherMs;
  s.stagedDescriptors += done.descriptors;
  if (ring) s.ringWrites++;
  else s.gatherWrites++;
  s.stagedBytes += set.copy.bytes * (set.pairs.length / 2) * set.srcPages.length;
}
