import { TransferError } from '../errors/transfer-error.js';

/**
 * Refuses a listener that is not a function when it is added. Taken as it was, it would be
 * called (and fail, and be logged) at every event for the engine's whole life, far from the
 * call that added it.
 */
export function checkListener(value: unknown, what: string): void {
  if (typeof value !== 'function')
    throw new TransferError('INVALID_ARGUMENT', `Expected ${what} to be a function, got ${value === null ? 'null' : typeof value}`);
}
