// The runtime's entry points take option objects from JavaScript callers too, where the
// types do not reach: a missing object is refused by name, not met later as a TypeError
// ("Cannot read properties of undefined") from deep inside.
import { TransferError } from '@te/connector';

function shown(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : typeof value;
}

/** Refuses anything but a plain object (not null, not an array) with INVALID_ARGUMENT naming `what`. */
export function expectObject(value: unknown, what: string): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new TransferError('INVALID_ARGUMENT', `Expected ${what} to be an object, got ${shown(value)}`);
}
