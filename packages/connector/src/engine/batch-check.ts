import { TransferError } from '../errors/transfer-error.js';
import { OP_READ, OP_WRITE, type TransferBatch } from '../spi/batch.js';

/** Checks a batch's shape once, in JS, so native code receives clean arrays. */
export function checkBatch(batch: TransferBatch): { hasRead: boolean } {
  if (typeof batch !== 'object' || batch === null) throw new TransferError('INVALID_ARGUMENT', 'Expected a batch {opcodes, localAddrs, remoteAddrs, lengths}');
  const { opcodes, localAddrs, remoteAddrs, lengths } = batch;
  if (!(opcodes instanceof Uint8Array)) throw new TransferError('INVALID_ARGUMENT', 'Expected `batch.opcodes` to be a Uint8Array');
  for (const [name, arr] of [
    ['localAddrs', localAddrs],
    ['remoteAddrs', remoteAddrs],
    ['lengths', lengths],
  ] as const) {
    if (!(arr instanceof BigUint64Array)) throw new TransferError('INVALID_ARGUMENT', `Expected \`batch.${name}\` to be a BigUint64Array`);
    if (arr.length !== opcodes.length)
      throw new TransferError('INVALID_ARGUMENT', `\`batch.${name}\` has ${arr.length} entries but \`batch.opcodes\` has ${opcodes.length}`);
  }
  let hasRead = false;
  for (let i = 0; i < opcodes.length; i++) {
    const op = opcodes[i];
    if (op === OP_READ) hasRead = true;
    else if (op !== OP_WRITE) throw new TransferError('INVALID_ARGUMENT', `\`batch.opcodes[${i}]\` is ${op}; expected 0 (read) or 1 (write)`);
  }
  return { hasRead };
}

export function checkTimeout(timeoutMs: unknown): number {
  if (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 2_147_483_647) {
    throw new TransferError('INVALID_ARGUMENT', `Expected the \`timeoutMs\` option to be a positive integer of milliseconds, got ${String(timeoutMs)}`);
  }
  return timeoutMs;
}
