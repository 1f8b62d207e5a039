import { TransferError } from '../errors/transfer-error.js';
import { OP_READ, OP_WRITE, type TransferBatch } from '../spi/batch.js';
import { checkMilliseconds } from '../timing/milliseconds.js';

/** What checkBatch learned of a batch's requests (one shared, frozen object per combination). */
export interface BatchShape {
  readonly hasRead: boolean;
  readonly gathers: boolean;
  readonly scatters: boolean;
  readonly verifies: boolean;
}

// Every batch is checked: answering from these 16 objects allocates nothing per batch.
const SHAPES: readonly BatchShape[] = Array.from({ length: 16 }, (_, bits) =>
  Object.freeze({ hasRead: (bits & 1) !== 0, gathers: (bits & 2) !== 0, scatters: (bits & 4) !== 0, verifies: (bits & 8) !== 0 }),
);

function checkAddressArray(name: string, arr: unknown, requests: number): void {
  if (!(arr instanceof BigUint64Array)) throw new TransferError('INVALID_ARGUMENT', `Expected \`batch.${name}\` to be a BigUint64Array`);
  if (arr.length !== requests) throw new TransferError('INVALID_ARGUMENT', `\`batch.${name}\` has ${arr.length} entries but \`batch.opcodes\` has ${requests}`);
}

/** Checks a batch's shape once, in JS, so native code receives clean arrays. */
export function checkBatch(batch: TransferBatch): BatchShape {
  if (typeof batch !== 'object' || batch === null) throw new TransferError('INVALID_ARGUMENT', 'Expected a batch {opcodes, localAddrs, remoteAddrs, lengths}');
  const { opcodes, localAddrs, remoteAddrs, lengths } = batch;
  if (!(opcodes instanceof Uint8Array)) throw new TransferError('INVALID_ARGUMENT', 'Expected `batch.opcodes` to be a Uint8Array');
  checkAddressArray('localAddrs', localAddrs, opcodes.length);
  checkAddressArray('remoteAddrs', remoteAddrs, opcodes.length);
  checkAddressArray('lengths', lengths, opcodes.length);
  let hasRead = false;
  for (let i = 0; i < opcodes.length; i++) {
    const op = opcodes[i];
    if (op === OP_READ) hasRead = true;
    else if (op !== OP_WRITE) throw new TransferError('INVALID_ARGUMENT', `\`batch.opcodes[${i}]\` is ${op}; expected 0 (read) or 1 (write)`);
  }
  const verifies = batch.verifyWrites ?? false;
  if (typeof verifies !== 'boolean') throw new TransferError('INVALID_ARGUMENT', `Expected \`batch.verifyWrites\` to be a boolean, got ${typeof verifies}`);
  if (verifies && hasRead)
    throw new TransferError('INVALID_ARGUMENT', '`batch.verifyWrites` verifies writes only; this batch has reads (send them in a batch of their own)');
  return SHAPES[(hasRead ? 1 : 0) | (checkRows(batch, 'local') ? 2 : 0) | (checkRows(batch, 'remote') ? 4 : 0) | (verifies ? 8 : 0)]!;
}

/**
 * One side's strided rows (TransferBatch.localRows / remoteRows and their pitches): whether
 * any request has rows on that side. Only writes have rows; whole rows that do not overlap
 * and end inside the address space.
 */
function checkRows(batch: TransferBatch, side: 'local' | 'remote'): boolean {
  const rows = side === 'local' ? batch.localRows : batch.remoteRows;
  const pitches = side === 'local' ? batch.localPitches : batch.remotePitches;
  const addrs = side === 'local' ? batch.localAddrs : batch.remoteAddrs;
  const { opcodes, lengths } = batch;
  if (rows === undefined && pitches === undefined) return false;
  const [r, p] = [`batch.${side}Rows`, `batch.${side}Pitches`];
  const verb = side === 'local' ? 'gathers' : 'scatters';
  if (!(rows instanceof Uint32Array) || !(pitches instanceof BigUint64Array))
    throw new TransferError('INVALID_ARGUMENT', `Expected \`${r}\` (a Uint32Array) and \`${p}\` (a BigUint64Array) together, or neither`);
  if (rows.length !== opcodes.length || pitches.length !== opcodes.length)
    throw new TransferError(
      'INVALID_ARGUMENT',
      `\`${r}\` has ${rows.length} entries and \`${p}\` ${pitches.length}, but \`batch.opcodes\` has ${opcodes.length}`,
    );
  let any = false;
  for (let i = 0; i < rows.length; i++) {
    const count = rows[i]!;
    if (count <= 1) continue;
    any = true;
    const where = `request ${i} ${verb} ${count} ${side} rows`;
    if (opcodes[i] !== OP_WRITE) throw new TransferError('INVALID_ARGUMENT', `${where}, but only a write has rows (it is a read)`);
    const n = BigInt(count);
    if (lengths[i]! % n !== 0n) throw new TransferError('INVALID_ARGUMENT', `${where}: its length of ${lengths[i]} bytes is not a whole number of rows`);
    const width = lengths[i]! / n;
    if (pitches[i]! < width) throw new TransferError('INVALID_ARGUMENT', `${where} of ${width} bytes, ${pitches[i]} bytes apart: rows would overlap`);
    if (addrs[i]! + (n - 1n) * pitches[i]! + width > 0xffff_ffff_ffff_ffffn)
      throw new TransferError('ADDRESS_OUT_OF_RANGE', `${where}: its last row ends past the end of the address space`);
  }
  return any;
}

export function checkTimeout(timeoutMs: unknown): number {
  return checkMilliseconds('the `timeoutMs` option', timeoutMs, 1);
}
