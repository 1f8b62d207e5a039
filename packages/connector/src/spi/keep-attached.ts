// A registered JS buffer's memory is read and written by native threads and by peers through
// a raw pointer. Detaching its ArrayBuffer (`transfer()`, or a transfer list of
// `postMessage`/`structuredClone`) hands that memory to a new owner, which may free it while
// the registration still points there: a peer's next write then lands in freed memory, or
// kills the process with SIGSEGV where the allocator unmapped it. So a buffer is kept
// attached before any transport takes its address, as far as each Node.js line allows.
import { markAsUntransferable } from 'node:worker_threads';
import { TransferError } from '../errors/transfer-error.js';
import type { BufferSource } from './memory.js';

const DETACHING_METHODS = ['transfer', 'transferToFixedLength'] as const;

/**
 * From Node.js 24 on, `markAsUntransferable` gives the buffer a V8 detach key, and a process
 * that had marked registered buffers died at exit ("FATAL ERROR: v8::FromJust Maybe value is
 * Nothing" in `Environment::RunCleanup`, in most runs of `@te/connector`'s suite on 24.22.3
 * and 26.10.0). There the mark is not used. Before 24 it is a flag that transfer lists honour.
 */
export const MARK_IS_SAFE = Number(process.versions.node.split('.')[0]) < 24;

/** Whether keepAttached also keeps a buffer named in a transfer list attached (before Node.js 24: the mark). */
export const TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS = MARK_IS_SAFE;

/** Whether this Node.js has `ArrayBuffer.prototype.transfer` (22 and later). */
const HAS_TRANSFER = typeof (ArrayBuffer.prototype as { transfer?: unknown }).transfer === 'function';

function refuseDetaching(this: ArrayBuffer): never {
  throw new TransferError(
    'MEMORY_IN_USE',
    'This ArrayBuffer is registered with a transfer engine: its memory cannot be transferred (peers write to it). Copy it instead (slice())',
  );
}

/**
 * Keeps the memory of `buffer` with its ArrayBuffer for good (also after `unregisterMemory`):
 * before Node.js 24 it is marked untransferable, so transfer lists copy it (20) or refuse it
 * (22); from Node.js 22 on, its own `transfer` and `transferToFixedLength` throw
 * `MEMORY_IN_USE`. A SharedArrayBuffer cannot be detached and is left as is.
 */
export function keepAttached(buffer: BufferSource): void {
  const arrayBuffer = ArrayBuffer.isView(buffer) ? buffer.buffer : buffer;
  if (!(arrayBuffer instanceof ArrayBuffer)) return;
  if (MARK_IS_SAFE) markAsUntransferable(arrayBuffer);
  // A frozen or sealed buffer takes no methods of its own; it stays detachable by transfer().
  if (!HAS_TRANSFER || !Object.isExtensible(arrayBuffer)) return;
  for (const name of DETACHING_METHODS) {
    if (Object.hasOwn(arrayBuffer, name)) continue;
    Object.defineProperty(arrayBuffer, name, { value: refuseDetaching, writable: false, configurable: false, enumerable: false });
  }
}
