import * as zlib from 'node:zlib';
import { TransferError, type TransferEngine } from '@te/connector';
import type { BufferTable } from '../plan/index.js';

/*
 * Optional end-to-end integrity of whole-page KV (the per-page path: both sides hold the
 * same heads per page): the prefill takes a CRC-32 of every page of every layer buffer it
 * writes, when it writes it, and sends them with its Success report; the decode takes the
 * same over its destination pages before it counts that report, and fails the room with
 * DATA_CORRUPTED naming the layer and pages when one differs. Host memory only (a view of
 * it must exist); zlib's CRC-32 runs natively (Node >= 20.15), a table-driven one elsewhere.
 */

const native = (zlib as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;
let table: Uint32Array | undefined;

function crcTable(): Uint32Array {
  if (table) return table;
  table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
}

/** CRC-32 (IEEE) of `data`. */
export function crc32(data: Uint8Array): number {
  if (native) return native(data) >>> 0;
  const t = crcTable();
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i++) c = t[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** Whether KV checksums are on: the option, else TE_KV_CHECKSUMS=1. */
export function checksumsEnabled(option: boolean | undefined, env: NodeJS.ProcessEnv = process.env): boolean {
  return option ?? /^(1|true|on)$/i.test(env.TE_KV_CHECKSUMS ?? '');
}

/** Host views of a buffer table's buffers (undefined where one is not host memory this engine can read). */
export function viewsOf(engine: TransferEngine, t: BufferTable): (Uint8Array | undefined)[] {
  const out: (Uint8Array | undefined)[] = [];
  for (let i = 0; i < t.addrs.length; i++) out.push(engine.hostView(BigInt(t.addrs[i]!), BigInt(t.lengths[i]!)));
  return out;
}

/**
 * The checksums one prefill rank sends one decode rank for a room: per page of the room
 * (in the room's order), per layer buffer it writes (`buffers`, in order), page-major.
 */
export class RoomChecksums {
  private readonly sums: number[] = [];

  constructor(readonly buffers: readonly number[]) {}

  /** Records pages [offset, offset + pages.length) of the room, read from `views` of the source. */
  record(views: readonly (Uint8Array | undefined)[], itemLen: number, pages: Uint32Array, offset: number, only?: ReadonlySet<number>): void {
    for (let i = 0; i < pages.length; i++) {
      const p = pages[i]!;
      for (let b = 0; b < this.buffers.length; b++) {
        const k = this.buffers[b]!;
        if (only && !only.has(k)) continue;
        this.sums[(offset + i) * this.buffers.length + b] = crc32(views[k]!.subarray(p * itemLen, (p + 1) * itemLen));
      }
    }
  }

  /** Every page's checksums, or undefined when one was never recorded (a route that is not per page). */
  wire(pages: number): Uint32Array | undefined {
    const n = pages * this.buffers.length;
    if (this.sums.length < n) return undefined;
    const out = new Uint32Array(n);
    for (let i = 0; i < n; i++) {
      if (this.sums[i] === undefined) return undefined;
      out[i] = this.sums[i]!;
    }
    return out;
  }
}

/**
 * The decode's check of one prefill rank's Success report: each page of each of its layer
 * buffers `buffers` (absolute layer and K/V named by `nameOf`) against `sums`; throws
 * DATA_CORRUPTED naming the first layer that differs and its pages.
 */
export function checkPages(room: bigint, views: readonly (Uint8Array | undefined)[], itemLen: number, pages: Uint32Array, buffers: readonly number[], sums: Uint32Array, nameOf: (buffer: number) => string): void {
  if (sums.length !== pages.length * buffers.length) throw new TransferError('PROTOCOL_MISMATCH', `room ${room}: ${sums.length} checksums for ${pages.length} pages × ${buffers.length} buffers`, { details: { room } });
  const bad = new Map<number, number[]>();
  for (let i = 0; i < pages.length; i++) {
    const p = pages[i]!;
    for (let b = 0; b < buffers.length; b++) {
      const view = views[buffers[b]!];
      if (!view) continue;
      if (crc32(view.subarray(p * itemLen, (p + 1) * itemLen)) !== sums[i * buffers.length + b]) {
        const list = bad.get(buffers[b]!) ?? [];
        list.push(p);
        bad.set(buffers[b]!, list);
      }
    }
  }
  if (bad.size === 0) return;
  const [buffer, badPages] = [...bad][0]!;
  throw new TransferError('DATA_CORRUPTED', `room ${room}: KV checksum mismatch in ${nameOf(buffer)}, destination pages ${badPages.slice(0, 16).join(', ')}${badPages.length > 16 ? ` (+${badPages.length - 16})` : ''}${bad.size > 1 ? `, and ${bad.size - 1} more buffers` : ''}`, { details: { room, buffer, pages: badPages.slice(0, 64) } });
}
