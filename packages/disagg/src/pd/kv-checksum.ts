import { TransferError, parseEnvBoolean, type TransferEngine } from '@te/connector';
import { Checksummer, ChecksumList, addressOf, type CopyRegion } from '@te/staging';
import type { BufferTable } from '../plan/index.js';
import type { PageGeometry } from '../plan/page-geometry.js';
import { planSliceCopy, type HeadSlice, type SliceCopy } from '../plan/slice-copy.js';

/*
 * Optional end-to-end integrity of what a prefill rank writes into a decode rank: KV, state
 * and aux. One algorithm, CRC32C (Castagnoli), computed by @te/staging's checksummer on
 * native threads (the CPU's crc32 instruction where it has one), never on the JS thread.
 *
 * What is checksummed is a *piece*: one source page's head slice of one layer buffer, as the
 * bytes it occupies in the decode's page, in the decode's address order. The prefill walks
 * its source slice in that order (the strided copy's source side: rows and reps in
 * destination order), the decode walks its landed slice (the destination side); neither
 * gathers anything. A whole page is the piece of a write without a head slice, and a piece
 * is the same whatever the route (direct, gather, ring scatter, per token), so a staged
 * or head-sliced write is checked like a whole-page one. State: the slot's slice of each
 * state buffer (a Mamba slot's shard, or the whole slot); aux: the whole slot.
 */

/**
 * How KV integrity is checked: `off`; `pages` (the CRC32C pieces below, always); `auto` (on:
 * where the transport to a decode rank verifies writes and the room's KV passes through no
 * staging copy, the transport's digests, taken as the bytes are sent and as they land
 * (transfer-verified.ts); elsewhere pages).
 */
export type ChecksumMode = 'off' | 'pages' | 'auto';

/**
 * The checksum mode: the option (true: auto), else TE_KV_CHECKSUMS (a boolean, true for auto,
 * or `pages`), else off. Another value of the variable is INVALID_CONFIG: read as off, a
 * misspelt value would turn off the check it was set to turn on.
 */
export function checksumMode(option: boolean | 'pages' | undefined, env: NodeJS.ProcessEnv = process.env): ChecksumMode {
  if (option === 'pages') return 'pages';
  if (option !== undefined) return option ? 'auto' : 'off';
  const v = (env.TE_KV_CHECKSUMS ?? '').trim();
  if (v === '') return 'off';
  if (/^pages$/i.test(v)) return 'pages';
  try {
    return parseEnvBoolean('TE_KV_CHECKSUMS', v) ? 'auto' : 'off';
  } catch {
    throw new TransferError(
      'INVALID_CONFIG',
      `Expected environment variable TE_KV_CHECKSUMS to be a boolean (1/0, true/false, yes/no, on/off) or pages, got ${JSON.stringify(env.TE_KV_CHECKSUMS)}`,
    );
  }
}

/** Whether KV checksums are on (either mode): the option, else TE_KV_CHECKSUMS. */
export function checksumsEnabled(option: boolean | 'pages' | undefined, env: NodeJS.ProcessEnv = process.env): boolean {
  return checksumMode(option, env) !== 'off';
}

/** Host views of a buffer table's buffers (undefined where one is not host memory this engine can read). */
export function viewsOf(engine: TransferEngine, t: BufferTable): (Uint8Array | undefined)[] {
  const out: (Uint8Array | undefined)[] = [];
  for (let i = 0; i < t.addrs.length; i++) out.push(engine.hostView(BigInt(t.addrs[i]!), BigInt(t.lengths[i]!)));
  return out;
}

let shared: Checksummer | undefined;

/**
 * Runs a batch on the process's checksummer, reading only `regions` (the buffers the jobs
 * were planned over): a job outside them rejects with ADDRESS_OUT_OF_RANGE before any byte
 * is read. The regions are set and the batch checked in one synchronous step, so batches of
 * different ranks sharing the checksummer never see each other's regions.
 */
export function runChecksums(regions: readonly CopyRegion[], jobs: ChecksumList): Promise<Uint32Array> {
  if (jobs.count === 0) return Promise.resolve(new Uint32Array(0));
  try {
    shared ??= Checksummer.create();
    shared.setRegions(regions);
    return shared.checksum(jobs);
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * A buffer table as the checksummer reads it: each buffer's address where the native code
 * finds its bytes (the engine's address, or the JS buffer's where a transport written in
 * JavaScript names memory by addresses of its own); NaN where it is not host memory.
 */
export class HostTable {
  readonly native: Float64Array;

  constructor(
    engine: TransferEngine,
    readonly table: BufferTable,
  ) {
    this.native = Float64Array.from(viewsOf(engine, table), (v) => (v ? Number(addressOf(v)) : Number.NaN));
  }

  /** Whether every buffer is host memory. */
  get host(): boolean {
    return this.native.every((a) => !Number.isNaN(a));
  }

  regions(): CopyRegion[] {
    const out: CopyRegion[] = [];
    for (let i = 0; i < this.native.length; i++) if (!Number.isNaN(this.native[i]!)) out.push({ addr: this.native[i]!, length: this.table.lengths[i]! });
    return out;
  }

  /** Where item `item` of buffer `buffer` starts, for the checksummer. */
  item(buffer: number, item: number): number {
    return this.native[buffer]! + item * this.table.itemLens[buffer]!;
  }
}

/**
 * The piece geometry between one prefill page and the decode page it lands in, as the
 * decode computes it from its own page and the slice it was told: the source laid out like
 * the destination (the byte order of a piece is the destination's whatever the source's).
 */
export function landedCopy(dst: PageGeometry, prefillTokens: number, slice: HeadSlice): SliceCopy {
  const src: PageGeometry = { tokens: prefillTokens, heads: slice.count, headBytes: dst.headBytes, layout: dst.layout };
  return planSliceCopy(src, dst, { srcOffset: 0, dstOffset: slice.dstOffset, count: slice.count });
}

/** Pushes the source side of one piece (the prefill's walk) at `item`, the source page's base for the checksummer. */
export function pushSource(list: ChecksumList, c: SliceCopy, item: number): void {
  list.push(item + c.srcOffset, c.width, c.rows, c.srcPitch, c.reps, c.srcRepStride);
}

/** Pushes the destination side of one piece (the decode's walk): `item` the decode page's base, `sub` the prefill page's place in it. */
export function pushLanded(list: ChecksumList, c: SliceCopy, item: number, sub: number): void {
  list.push(item + c.dstOffset + sub * c.subStride, c.width, c.rows, c.dstPitch, c.reps, c.dstRepStride);
}

/** A list of numbers, the first 16 shown and how many more. */
export function listed(values: readonly number[]): string {
  return `${values.slice(0, 16).join(', ')}${values.length > 16 ? ` (+${values.length - 16})` : ''}`;
}

export function corrupted(room: bigint, message: string, details: Record<string, unknown>): TransferError {
  return new TransferError('DATA_CORRUPTED', `room ${room}: ${message}`, { details: { room, ...details } });
}
