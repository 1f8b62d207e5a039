import { Packr } from 'msgpackr';

/**
 * The control-plane codec: msgpack with every 64-bit integer decoded as bigint, so
 * addresses, lengths and keys never pass through a lossy Number.
 */
const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true });

export function encodeMessage(value: unknown): Buffer {
  return packr.pack(value);
}

export function decodeMessage<T = unknown>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}
