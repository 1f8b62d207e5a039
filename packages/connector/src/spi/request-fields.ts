// The checks `batchOf` makes before it stores a request in its typed arrays, which would
// otherwise take a bad value silently: a BigUint64Array stores -1n as 2^64 - 1, a Uint32Array
// truncates 2.5 rows to 2, and an op other than 'write' would have been stored as a read.
import { TransferError } from '../errors/transfer-error.js';

const MAX_U64 = (1n << 64n) - 1n;

function shown(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value);
  if (value === null || typeof value !== 'object') return String(value);
  return Array.isArray(value) ? 'an array' : 'an object';
}

function invalid(i: number, field: string, expected: string, value: unknown): TransferError {
  return new TransferError('INVALID_ARGUMENT', `Expected request ${i}'s \`${field}\` to be ${expected}, got ${shown(value)}`);
}

/** Whether request i is a write; a request that is not an object, or an op other than 'write' or 'read', is INVALID_ARGUMENT. */
export function isWrite(r: unknown, i: number): boolean {
  if (typeof r !== 'object' || r === null) throw invalid(i, 'request', 'an object { op, local, remote, length }', r);
  const op = (r as { op?: unknown }).op;
  if (op === 'write' || op === 'read') return op === 'write';
  throw invalid(i, 'op', "'write' or 'read'", op);
}

/** An address: a bigint from 0 to 2^64 - 1 (what `registerMemory` and a segment's buffers give). */
export function addressOf(value: unknown, i: number, field: string): bigint {
  if (typeof value === 'bigint' && value >= 0n && value <= MAX_U64) return value;
  throw invalid(i, field, 'an address, a bigint from 0 to 2^64 - 1 (a number is not exact above 2^53: use BigInt)', value);
}

/** A byte count: a bigint from 0 to 2^64 - 1, or a non-negative safe integer number. */
export function byteCountOf(value: unknown, i: number, field: string): bigint {
  if (typeof value === 'bigint' && value >= 0n && value <= MAX_U64) return value;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  throw invalid(i, field, 'a whole number of bytes, a bigint from 0 to 2^64 - 1 or a non-negative safe integer', value);
}

/** A row count: an integer from 0 to 2^32 - 1 (absent: 1; 0 and 1 are an ordinary request). */
export function rowCountOf(value: unknown, i: number, field: string): number {
  if (value === undefined) return 1;
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 0xffffffff) return value;
  throw invalid(i, field, 'an integer from 0 to 4294967295', value);
}
