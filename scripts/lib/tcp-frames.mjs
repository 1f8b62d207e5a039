// mooncake-tcp frames written byte by byte, for the tools that feed its parser directly: the
// fuzzers' seed corpus (fuzz/make-seeds.mjs) and the soak's hostile connections
// (scripts/soak.mjs). The layout is plugins/mooncake-tcp/native/wire.h's.

/** Little-endian integers as bytes. */
export const u16 = (v) => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(v);
  return b;
};
export const u32 = (v) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
export const u64 = (v) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};

/** The frame ops (wire.h `Op`). */
export const TCP_OP = Object.freeze({ write: 1, read: 2, notify: 3, revoke: 4, writev: 5, writeRows: 6, hello: 16, auth: 17 });
const MAGIC = 0x43544554; // 'T','E','T','C'
const VERSION = 1;

/**
 * A 56-byte header, then `body`. `length` defaults to the body's; `spanAddr` and `spanLength`
 * (the whole range of the request a slice belongs to) default to none.
 */
export function tcpFrame({ op, id = 1n, addr = 0n, body = Buffer.alloc(0), length, spanAddr = 0n, spanLength = 0n }) {
  const header = Buffer.concat([
    u32(MAGIC),
    u16(VERSION),
    Buffer.from([op, 0]),
    u32(0),
    u32(0),
    u64(id),
    u64(addr),
    u64(length ?? body.length),
    u64(spanAddr),
    u64(spanLength),
  ]);
  return Buffer.concat([header, body]);
}

/** A HELLO body: the client's epoch, its 16-byte nonce and its name. */
export function helloBody(clientEpoch, nonce, name) {
  const bytes = Buffer.from(name);
  return Buffer.concat([u64(clientEpoch), nonce, u16(bytes.length), bytes]);
}
