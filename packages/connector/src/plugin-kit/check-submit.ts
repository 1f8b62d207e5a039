import { TransferError } from '../errors/transfer-error.js';
import { checkMilliseconds } from '../timing/milliseconds.js';
import type { SubmitOptions, TransferBatch } from '../spi/batch.js';

/**
 * The checks every transport repeats before handing a batch to native code (the engine
 * checks too, but a transport may be driven directly).
 */
export function checkSubmit(plugin: string, peer: string, batch: TransferBatch, options: SubmitOptions, maxNotifyBytes = 65536): void {
  checkShapes(plugin, batch, options);
  const n = batch.opcodes.length;
  if (batch.localAddrs.length !== n || batch.remoteAddrs.length !== n || batch.lengths.length !== n) {
    throw new TransferError(
      'INVALID_ARGUMENT',
      `batch arrays differ in length (opcodes ${n}, localAddrs ${batch.localAddrs.length}, remoteAddrs ${batch.remoteAddrs.length}, lengths ${batch.lengths.length})`,
      { plugin },
    );
  }
  for (let i = 0; i < n; i++) {
    const op = batch.opcodes[i];
    if (op !== 0 && op !== 1) throw new TransferError('INVALID_ARGUMENT', `\`opcodes[${i}]\` is ${op}; expected 0 (read) or 1 (write)`, { plugin });
  }
  // The engine's rule (checkMilliseconds, as batch-check.ts asks it), so a transport driven
  // directly never arms a deadline the engine would have refused; named by plugin like the rest.
  try {
    checkMilliseconds('`timeoutMs`', options.timeoutMs, 1);
  } catch (e) {
    throw new TransferError('INVALID_ARGUMENT', (e as Error).message, { plugin });
  }
  if (options.notify && options.notify.length > maxNotifyBytes)
    throw new TransferError('INVALID_ARGUMENT', `a notification payload is at most ${maxNotifyBytes} bytes, got ${options.notify.length}`, { plugin });
  if (options.signal?.aborted) throw new TransferError('ABORTED', `batch to "${peer}" aborted before it was submitted`, { plugin });
}

const BATCH_ARRAYS = [
  ['opcodes', Uint8Array],
  ['localAddrs', BigUint64Array],
  ['remoteAddrs', BigUint64Array],
  ['lengths', BigUint64Array],
] as const;

function kindOf(v: unknown): string {
  return v === null ? 'null' : typeof v === 'object' ? (v.constructor?.name ?? 'an object') : typeof v;
}

// A transport driven directly (through the SPI, from JavaScript) can be handed anything: a
// wrong shape is a typed INVALID_ARGUMENT, not a TypeError from deep inside the checks.
function checkShapes(plugin: string, batch: TransferBatch, options: SubmitOptions): void {
  if (typeof batch !== 'object' || batch === null)
    throw new TransferError('INVALID_ARGUMENT', `a batch must be an object of typed arrays (allocateBatch), got ${kindOf(batch)}`, { plugin });
  for (const [field, type] of BATCH_ARRAYS) {
    const value = (batch as unknown as Record<string, unknown>)[field];
    if (!(value instanceof type)) throw new TransferError('INVALID_ARGUMENT', `\`${field}\` must be a ${type.name}, got ${kindOf(value)}`, { plugin });
  }
  if (typeof options !== 'object' || options === null)
    throw new TransferError('INVALID_ARGUMENT', `submit options must be an object ({ timeoutMs }), got ${kindOf(options)}`, { plugin });
}
