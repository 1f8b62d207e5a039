// A registered JS buffer's memory is read and written by native threads and by peers through
// a raw pointer. Detaching its ArrayBuffer (`transfer()`, or a transfer list of
// `postMessage`/`structuredClone`) hands that memory to a new owner, which may free it while
// the registration still points there: a peer's next write then lands in freed memory, or
// kills the process with SIGSEGV where the allocator unmapped it. So a buffer is made
// untransferable before any transport takes its address.
import { markAsUntransferable } from 'node:worker_threads';
import { TransferError } from '../errors/transfer-error.js';
import type { BufferSource } from './memory.js';

const DETACHING_METHODS = ['transfer', 'transferToFixedLength'] as const;

function detachingMethodsOutliveTheMark(): boolean {
  const probe = new ArrayBuffer(1) as ArrayBuffer & { transfer?: () => ArrayBuffer };
  if (typeof probe.transfer !== 'function') return false;
  markAsUntransferable(probe);
  try {
    probe.transfer();
    return true;
  } catch {
    return false;
  }
}

/**
 * Node.js 22 marks a buffer untransferable for `postMessage` and `structuredClone` only:
 * its `ArrayBuffer.prototype.transfer()` still detaches a marked buffer (24 and later refuse).
 * There the registered buffer gets methods of its own that refuse instead.
 */
const SHADOW_DETACHING_METHODS = detachingMethodsOutliveTheMark();

function refuseDetaching(this: ArrayBuffer): never {
  throw new TransferError(
    'MEMORY_IN_USE',
    'This ArrayBuffer is registered with a transfer engine: its memory cannot be transferred (peers write to it). Copy it instead (slice())',
  );
}

/**
 * Makes the memory of `buffer` stay with its ArrayBuffer for good: no transfer list and no
 * `transfer()` can detach it (there is no way to undo the mark, so it stays after
 * `unregisterMemory`). A SharedArrayBuffer cannot be detached and is left as is.
 */
export function keepAttached(buffer: BufferSource): void {
  const arrayBuffer = ArrayBuffer.isView(buffer) ? buffer.buffer : buffer;
  if (!(arrayBuffer instanceof ArrayBuffer)) return;
  markAsUntransferable(arrayBuffer);
  // A frozen or sealed buffer takes no methods of its own; Node.js 22 leaves it detachable.
  if (!SHADOW_DETACHING_METHODS || !Object.isExtensible(arrayBuffer)) return;
  for (const name of DETACHING_METHODS) {
    if (Object.hasOwn(arrayBuffer, name)) continue;
    Object.defineProperty(arrayBuffer, name, { value: refuseDetaching, writable: false, configurable: false, enumerable: false });
  }
}
