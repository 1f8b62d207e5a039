// Hand-built frames for hostile-peer tests (mirrors native/wire.h).
import { connect, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';

export const OP = { WRITE: 1, READ: 2, NOTIFY: 3, REVOKE: 4, WRITEV: 5, WRITE_ROWS: 6, HELLO: 16, AUTH: 17, RESPONSE: 0x80 } as const;

/** HELLO_ACK body: target nonce (16) | auth required (1) | features (1). */
export const HELLO_ACK_BODY = 18;
/** HELLO_ACK feature bit: the target answers REVOKE. */
export const FEATURE_REVOKE = 1;
/** HELLO_ACK feature bit: the target takes WRITEV frames. */
export const FEATURE_WRITEV = 2;
/** HELLO_ACK feature bit: the target takes WRITE_ROWS frames. */
export const FEATURE_ROWS = 4;
/** Bytes of one WRITEV table entry: addr | length | span_addr | span_length (u64 each). */
export const SEGMENT_ENTRY = 32;

export const HEADER = 56;

export function header(op: number, fields: { id?: bigint; addr?: bigint; length?: bigint; version?: number; magic?: number } = {}): Buffer {
  const h = Buffer.alloc(HEADER);
  h.writeUInt32LE(fields.magic ?? 0x43544554, 0);
  h.writeUInt16LE(fields.version ?? 1, 4);
  h[6] = op;
  h.writeBigUInt64LE(fields.id ?? 1n, 16);
  h.writeBigUInt64LE(fields.addr ?? 0n, 24);
  h.writeBigUInt64LE(fields.length ?? 0n, 32);
  return h;
}

/** A WRITEV frame: its header, its table (no spans), then the segments' bytes. */
export function writev(id: bigint, segments: { addr: bigint; data: Uint8Array }[]): Buffer {
  const table = Buffer.alloc(segments.length * SEGMENT_ENTRY);
  segments.forEach((s, i) => {
    table.writeBigUInt64LE(s.addr, i * SEGMENT_ENTRY);
    table.writeBigUInt64LE(BigInt(s.data.length), i * SEGMENT_ENTRY + 8);
  });
  const bytes = segments.reduce((n, s) => n + s.data.length, 0);
  const h = header(OP.WRITEV, { id, addr: BigInt(segments.length), length: BigInt(table.length + bytes) });
  return Buffer.concat([h, table, ...segments.map((s) => Buffer.from(s.data))]);
}

/**
 * A WRITE_ROWS frame: packed bytes `data` from packed offset `from` of a request whose rows
 * (`width` bytes, `pitch` apart) span [spanAddr, +spanLength).
 */
export function writeRows(id: bigint, f: { from: bigint; spanAddr: bigint; spanLength: bigint; width: bigint; pitch: bigint; data: Uint8Array }): Buffer {
  const h = header(OP.WRITE_ROWS, { id, addr: f.from, length: BigInt(16 + f.data.length) });
  h.writeBigUInt64LE(f.spanAddr, 40);
  h.writeBigUInt64LE(f.spanLength, 48);
  const table = Buffer.alloc(16);
  table.writeBigUInt64LE(f.width, 0);
  table.writeBigUInt64LE(f.pitch, 8);
  return Buffer.concat([h, table, Buffer.from(f.data)]);
}

export function hello(expectedEpoch: bigint, name = 'raw', nonce: Buffer = randomBytes(16)): Buffer {
  const body = Buffer.alloc(8 + 16 + 2 + name.length);
  body.writeBigUInt64LE(1n, 0);
  nonce.copy(body, 8);
  body.writeUInt16LE(name.length, 24);
  body.write(name, 26);
  return Buffer.concat([header(OP.HELLO, { addr: expectedEpoch, length: BigInt(body.length) }), body]);
}

export interface RawConn {
  socket: Socket;
  /** Resolves with the next `n` bytes, or null if the connection closed first. */
  read(n: number): Promise<Buffer | null>;
  /** Resolves true when the server closes the connection within `ms`. */
  closed(ms: number): Promise<boolean>;
}

export async function rawConnect(port: number): Promise<RawConn> {
  const socket = connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let buf = Buffer.alloc(0);
  let ended = false;
  let wake: (() => void) | undefined;
  socket.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    wake?.();
  });
  const onEnd = () => {
    ended = true;
    wake?.();
  };
  socket.on('end', onEnd).on('close', onEnd).on('error', onEnd);
  return {
    socket,
    async read(n) {
      while (buf.length < n && !ended) await new Promise<void>((r) => (wake = r));
      if (buf.length < n) return null;
      const out = buf.subarray(0, n);
      buf = buf.subarray(n);
      return out;
    },
    async closed(ms) {
      const deadline = Date.now() + ms;
      while (!ended && Date.now() < deadline)
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, 20);
        });
      return ended;
    },
  };
}
