import { TransferError } from '../errors/transfer-error.js';
import { MAX_TIMER_MS } from './deadlines.js';

/**
 * `value` as a whole number of milliseconds within [min, max], else INVALID_ARGUMENT naming
 * `what` (e.g. "the `timeoutMs` option") and the bounds. `max` defaults to the longest delay
 * a Node.js timer holds: a longer timeout would run after 1 ms, failing at once what it was
 * meant to wait for. `why` says where a tighter bound comes from.
 */
export function checkMilliseconds(what: string, value: unknown, min: number, max: number = MAX_TIMER_MS, why?: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw new TransferError(
      'INVALID_ARGUMENT',
      `Expected ${what} to be an integer of milliseconds from ${min} to ${max}${why ? ` (${why})` : ''}, got ${String(value)}`,
    );
  return value;
}
