import { Packr } from 'msgpackr';
import { TransferError } from '../errors/transfer-error.js';
import { checkMsgpackBounds } from './msgpack-bounds.js';

/**
 * The control-plane codec: msgpack with every 64-bit integer decoded as bigint, so
 * addresses, lengths and keys never pass through a lossy Number, and typed arrays
 * (page index lists, BigUint64Array address lists) keep their type.
 */
const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true, moreTypes: true });

export function encodeMessage(value: unknown): Buffer {
  return packr.pack(value);
}

/**
 * Decodes bytes from a peer; headers that would make the decoder over-allocate are refused
 * first. Bytes that are not a whole msgpack value fail with `BAD_FRAME` (the scan's or the
 * decoder's reason as the message, the original error as `cause`), as every error te
 * hands out is a TransferError.
 */
export function decodeMessage<T = unknown>(bytes: Uint8Array): T {
  try {
    checkMsgpackBounds(bytes);
    return packr.unpack(bytes) as T;
  } catch (cause) {
    throw new TransferError('BAD_FRAME', `malformed msgpack message: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}
