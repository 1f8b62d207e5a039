/**
 * Mooncake's P2P handshake framing: u64 length (little-endian on every platform Mooncake
 * supports) = 1 + JSON bytes, one type byte, then the JSON text. A legacy frame has no type
 * byte: a payload whose first byte is above 3 is all JSON and is answered untyped.
 */
import { TransferError } from '@te/connector';

export const MSG_CONNECTION = 0;
export const MSG_METADATA = 1;
export const MSG_NOTIFY = 2;
export const MSG_PROBE = 3;
/** The legacy untyped frame (treated as a Connection request, answered without a type byte). */
export const MSG_LEGACY = -1;

/** Mooncake's default MC_HANDSHAKE_MAX_LENGTH. */
export const DEFAULT_MAX_FRAME = 1 << 20;

export interface HandshakeFrame {
  type: number;
  json: string;
}

function bad(message: string): TransferError {
  return new TransferError('BAD_FRAME', message, { plugin: 'mooncake-wire' });
}

export function encodeFrame(type: number, json: string): Buffer {
  const body = Buffer.from(json, 'utf8');
  const typed = type !== MSG_LEGACY;
  const out = Buffer.alloc(8 + (typed ? 1 : 0) + body.length);
  out.writeBigUInt64LE(BigInt(body.length + (typed ? 1 : 0)), 0);
  if (typed) out[8] = type;
  body.copy(out, typed ? 9 : 8);
  return out;
}

/**
 * Collects one frame from a byte stream. `push` returns the frame once it is complete,
 * undefined while more bytes are needed, and throws BAD_FRAME for a length of 0, one above
 * `maxFrame`, an unknown type, or bytes after the frame.
 */
export class FrameReader {
  #chunks: Buffer[] = [];
  #have = 0;
  #need = -1;
  constructor(readonly maxFrame = DEFAULT_MAX_FRAME) {}

  push(chunk: Buffer): HandshakeFrame | undefined {
    this.#chunks.push(chunk);
    this.#have += chunk.length;
    if (this.#need < 0 && this.#have >= 8) {
      const len = Buffer.concat(this.#chunks).readBigUInt64LE(0);
      if (len === 0n) throw bad('handshake frame of length 0');
      if (len > BigInt(this.maxFrame)) throw bad(`handshake frame of ${len} bytes, more than the limit of ${this.maxFrame}`);
      this.#need = 8 + Number(len);
    }
    if (this.#need < 0 || this.#have < this.#need) return undefined;
    if (this.#have > this.#need) throw bad(`${this.#have - this.#need} bytes after the handshake frame (one message per connection)`);
    return decodeFrame(Buffer.concat(this.#chunks));
  }
}

/** Decodes one complete frame (length prefix included). */
export function decodeFrame(b: Buffer): HandshakeFrame {
  if (b.length < 9) throw bad(`handshake frame of ${b.length} bytes is too short`);
  const len = b.readBigUInt64LE(0);
  if (len !== BigInt(b.length - 8)) throw bad(`handshake frame says ${len} bytes, carries ${b.length - 8}`);
  const first = b[8]!;
  if (first > MSG_PROBE) return { type: MSG_LEGACY, json: b.subarray(8).toString('utf8') };
  return { type: first, json: b.subarray(9).toString('utf8') };
}
