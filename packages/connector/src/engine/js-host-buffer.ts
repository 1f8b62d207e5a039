// Host memory for an engine none of whose transports allocates it: one JS buffer.
import { constants as bufferConstants } from 'node:buffer';
import { TransferError } from '../errors/transfer-error.js';
import { MEMORY_KIND_PROVIDERS } from '../registry/builtins.js';

/**
 * A zeroed buffer of `size` bytes. Past the longest buffer this Node.js makes (4 GiB on
 * Node 20) that is INVALID_ARGUMENT saying what to do instead, not OUT_OF_MEMORY: the
 * machine may well have the memory. OUT_OF_MEMORY is left for an allocation that failed.
 */
export function jsHostBuffer(size: bigint): Uint8Array {
  if (size > BigInt(bufferConstants.MAX_LENGTH))
    throw new TransferError(
      'INVALID_ARGUMENT',
      `Cannot allocate ${size} bytes of host memory as one JS buffer (at most ${bufferConstants.MAX_LENGTH} on Node.js ${process.version}): ` +
        `allocate it natively and use registerMemory({ addr, length }), or add a transport that allocates host memory (${MEMORY_KIND_PROVIDERS.hostAllocator})`,
    );
  try {
    return new Uint8Array(Number(size));
  } catch (cause) {
    throw new TransferError('OUT_OF_MEMORY', `Cannot allocate ${size} bytes of host memory: ${(cause as Error).message}`, { cause });
  }
}
