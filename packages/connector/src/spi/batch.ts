import { TransferError } from '../errors/transfer-error.js';
import { addressOf, byteCountOf, isWrite, rowCountOf } from './request-fields.js';

/** Opcode of one request in a batch, as stored in `TransferBatch.opcodes`. */
export const OP_READ = 0;
export const OP_WRITE = 1;
export type TransferOp = 'read' | 'write';

/**
 * A batch of requests as struct-of-arrays: request i reads or writes `lengths[i]` bytes
 * between local `localAddrs[i]` and the peer's `remoteAddrs[i]`. One native call carries
 * the whole batch; nothing is done per request on the JS side.
 */
export interface TransferBatch {
  opcodes: Uint8Array;
  localAddrs: BigUint64Array;
  remoteAddrs: BigUint64Array;
  lengths: BigUint64Array;
  /**
   * Gathered writes (both or neither; only to transports whose capabilities say
   * `gatherWrites`): write i with `localRows[i]` = r > 1 takes its `lengths[i]` bytes from r
   * rows of `lengths[i] / r` bytes each, starting at `localAddrs[i]` and `localPitches[i]`
   * bytes apart, and lands them contiguously at the remote address: a strided gather
   * (a head slice of NHD pages) without a copy through staging memory. Rows 1 (or 0) is an
   * ordinary request.
   */
  localRows?: Uint32Array;
  localPitches?: BigUint64Array;
  /**
   * Scattered writes (both or neither; only to transports whose capabilities say
   * `scatterWrites`): write i with `remoteRows[i]` = r > 1 lands its `lengths[i]` bytes as r
   * rows of `lengths[i] / r` bytes each, starting at `remoteAddrs[i]` and `remotePitches[i]`
   * bytes apart: a head slice written straight into NHD pages that hold more heads per token
   * than the sender has, without a staging ring and a scatter copy at the receiver. The
   * peer checks the rows' whole span. A write may gather and scatter at once.
   */
  remoteRows?: Uint32Array;
  remotePitches?: BigUint64Array;
  /**
   * Verified writes (only to transports whose capabilities say `verifiedWrites`; writes
   * only): each write is reported done only once the peer showed that the bytes that landed
   * are the bytes sent, by a digest taken on each side as the bytes pass; where they differ
   * the write fails with DATA_CORRUPTED. What a transport covers (the wire, its own copies)
   * is in its documentation.
   */
  verifyWrites?: boolean;
}

export interface TransferRequest {
  op: TransferOp;
  local: bigint;
  remote: bigint;
  length: bigint | number;
  /** A gathered write: `length / rows` bytes from each of `rows` local rows, `localPitch` bytes apart (see TransferBatch.localRows). */
  rows?: number;
  localPitch?: bigint | number;
  /** A scattered write: its bytes land in `remoteRows` remote rows, `remotePitch` bytes apart (see TransferBatch.remoteRows). */
  remoteRows?: number;
  remotePitch?: bigint | number;
}

/** Whether request i has rows (more than one) in `rows`, one side's row counts. */
function hasRows(rows: Uint32Array | undefined, i: number): boolean {
  return rows !== undefined && rows[i]! > 1;
}

/** The bytes request i spans on one side: its length, or from its first row's start to its last row's end. */
function spanOf(batch: TransferBatch, rows: Uint32Array | undefined, pitches: BigUint64Array | undefined, i: number): bigint {
  if (!hasRows(rows, i)) return batch.lengths[i]!;
  const n = BigInt(rows![i]!);
  return (n - 1n) * pitches![i]! + batch.lengths[i]! / n;
}

/** Whether request i of `batch` scatters into remote rows. */
export function scattersRows(batch: TransferBatch, i: number): boolean {
  return hasRows(batch.remoteRows, i);
}

/** The remote bytes request i spans: its length, or from its first row's start to its last row's end. */
export function remoteSpan(batch: TransferBatch, i: number): bigint {
  return spanOf(batch, batch.remoteRows, batch.remotePitches, i);
}

/** Whether request i of `batch` gathers rows. */
export function gathersRows(batch: TransferBatch, i: number): boolean {
  return hasRows(batch.localRows, i);
}

/** The local bytes request i spans: its length, or from its first row's start to its last row's end. */
export function localSpan(batch: TransferBatch, i: number): bigint {
  return spanOf(batch, batch.localRows, batch.localPitches, i);
}

/**
 * Builds a batch from request objects (convenient for small batches; large ones build the
 * arrays directly). Each field is checked first: a bad one is INVALID_ARGUMENT naming the
 * request, where the typed arrays would store it changed.
 */
export function batchOf(requests: readonly TransferRequest[]): TransferBatch {
  if (!Array.isArray(requests)) throw new TransferError('INVALID_ARGUMENT', 'Expected an array of requests { op, local, remote, length }');
  const n = requests.length;
  const batch: TransferBatch = {
    opcodes: new Uint8Array(n),
    localAddrs: new BigUint64Array(n),
    remoteAddrs: new BigUint64Array(n),
    lengths: new BigUint64Array(n),
  };
  requests.forEach((r, i) => {
    batch.opcodes[i] = isWrite(r, i) ? OP_WRITE : OP_READ;
    batch.localAddrs[i] = addressOf(r.local, i, 'local');
    batch.remoteAddrs[i] = addressOf(r.remote, i, 'remote');
    batch.lengths[i] = byteCountOf(r.length, i, 'length');
  });
  if (requests.some((r) => r.rows !== undefined)) {
    batch.localRows = Uint32Array.from(requests, (r, i) => rowCountOf(r.rows, i, 'rows'));
    batch.localPitches = BigUint64Array.from(requests, (r, i) => byteCountOf(r.localPitch ?? 0, i, 'localPitch'));
  }
  if (requests.some((r) => r.remoteRows !== undefined)) {
    batch.remoteRows = Uint32Array.from(requests, (r, i) => rowCountOf(r.remoteRows, i, 'remoteRows'));
    batch.remotePitches = BigUint64Array.from(requests, (r, i) => byteCountOf(r.remotePitch ?? 0, i, 'remotePitch'));
  }
  return batch;
}

/** Allocates an empty batch of n requests, for planners that fill the arrays in place. */
export function allocateBatch(n: number): TransferBatch {
  if (!Number.isSafeInteger(n) || n < 0)
    throw new TransferError('INVALID_ARGUMENT', `Expected a batch size to be a non-negative integer, got ${typeof n === 'bigint' ? `${n}n` : String(n)}`);
  try {
    return {
      opcodes: new Uint8Array(n),
      localAddrs: new BigUint64Array(n),
      remoteAddrs: new BigUint64Array(n),
      lengths: new BigUint64Array(n),
    };
  } catch (cause) {
    // Past what a typed array may hold, or past the memory there is: V8's RangeError says which.
    throw new TransferError('INVALID_ARGUMENT', `A batch of ${n} requests cannot be allocated: ${(cause as Error).message}`, { cause });
  }
}

/** `array`'s entries at `indexes`, in that order. */
function pick<T extends Uint32Array | BigUint64Array>(array: T, indexes: Uint32Array): T {
  const out = new (array.constructor as new (n: number) => T)(indexes.length);
  for (let j = 0; j < indexes.length; j++) out[j] = array[indexes[j]!]!;
  return out;
}

/** Returns the requests at `indexes` as a new batch (used when a batch is split across transports). */
export function selectRequests(batch: TransferBatch, indexes: Uint32Array): TransferBatch {
  const out = allocateBatch(indexes.length);
  for (let j = 0; j < indexes.length; j++) {
    const i = indexes[j]!;
    out.opcodes[j] = batch.opcodes[i]!;
    out.localAddrs[j] = batch.localAddrs[i]!;
    out.remoteAddrs[j] = batch.remoteAddrs[i]!;
    out.lengths[j] = batch.lengths[i]!;
  }
  if (batch.localRows && batch.localPitches) [out.localRows, out.localPitches] = [pick(batch.localRows, indexes), pick(batch.localPitches, indexes)];
  if (batch.remoteRows && batch.remotePitches) [out.remoteRows, out.remotePitches] = [pick(batch.remoteRows, indexes), pick(batch.remotePitches, indexes)];
  if (batch.verifyWrites) out.verifyWrites = true;
  return out;
}

/** A copy of every array of `batch`, for a batch the engine holds past the caller's call. */
export function copyBatch(batch: TransferBatch): TransferBatch {
  const out: TransferBatch = {
    opcodes: batch.opcodes.slice(),
    localAddrs: batch.localAddrs.slice(),
    remoteAddrs: batch.remoteAddrs.slice(),
    lengths: batch.lengths.slice(),
  };
  if (batch.localRows && batch.localPitches) [out.localRows, out.localPitches] = [batch.localRows.slice(), batch.localPitches.slice()];
  if (batch.remoteRows && batch.remotePitches) [out.remoteRows, out.remotePitches] = [batch.remoteRows.slice(), batch.remotePitches.slice()];
  if (batch.verifyWrites) out.verifyWrites = true;
  return out;
}

export function batchSize(batch: TransferBatch): number {
  return batch.opcodes.length;
}

/** Total bytes in a batch. */
export function batchBytes(batch: TransferBatch): bigint {
  let total = 0n;
  for (let i = 0; i < batch.lengths.length; i++) total += batch.lengths[i]!;
  return total;
}

/** Per-submission options. */
export interface SubmitOptions {
  /** Milliseconds until the batch fails with TIMEOUT; no batch is without a deadline. */
  timeoutMs: number;
  /**
   * Aborting fails the batch with ABORTED once the transport settled it; a write whose
   * bytes may still land at the peer after that is marked `details.remoteMayBeWritten`.
   */
  signal?: AbortSignal;
  /** Delivered to the peer after every byte of the batch landed (requires the `notifications` capability). */
  notify?: Uint8Array;
}

/** Outcome of a batch: one status per request (0 = OK, else a native status). */
export interface BatchResult {
  statuses: Int32Array;
  bytes: bigint;
}

/** A small message delivered to this process after a peer's batch landed. */
export interface Notification {
  /** The segment name of the sender. */
  from: string;
  payload: Uint8Array;
}
