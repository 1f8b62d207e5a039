// Writes the committed seed corpora: well-formed frames and messages of every kind, so the
// fuzzers start from inputs that reach deep into each parser. Run: node fuzz/make-seeds.mjs
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TCP_OP, helloBody, tcpFrame, u16, u32, u64 } from '../scripts/lib/tcp-frames.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', 'packages', 'connector', 'package.json'));
const { Packr } = require('msgpackr');

function save(dir, name, bytes) {
  mkdirSync(join(here, 'corpus', dir), { recursive: true });
  writeFileSync(join(here, 'corpus', dir, name), bytes);
}
// mooncake-tcp: 56-byte header (see plugins/mooncake-tcp/native/wire.h); the fuzz target
// serves epoch 0x1122334455667788 and a region at 0x4a0000000000.
const EPOCH = 0x1122334455667788n;
const REGION = 0x4a0000000000n;
const hello = tcpFrame({ op: TCP_OP.hello, addr: EPOCH, body: helloBody(7, Buffer.alloc(16, 0xab), 'seed-peer') });
const data = Buffer.alloc(4096, 0x5c);
const write = tcpFrame({ op: TCP_OP.write, id: 2n, addr: REGION + 128n, body: data, spanAddr: REGION + 128n, spanLength: 4096n });
const read = tcpFrame({ op: TCP_OP.read, id: 3n, addr: REGION, length: 1024n, spanAddr: REGION, spanLength: 1024n });
const notify = tcpFrame({ op: TCP_OP.notify, id: 4n, body: Buffer.from('te-notify-payload') });
save('tcp_frames', 'hello', hello);
save('tcp_frames', 'hello-write', Buffer.concat([hello, write]));
save('tcp_frames', 'hello-read', Buffer.concat([hello, read]));
save('tcp_frames', 'hello-notify', Buffer.concat([hello, notify]));
// WRITEV: a table of (addr, length, span_addr, span_length) entries, then the segments' bytes.
const segments = [
  [REGION + 64n, 100n],
  [REGION + (1n << 20n) - 8n, 64n], // crosses the region's end: refused alone
  [REGION + 8192n, 3000n],
];
const table = Buffer.concat(segments.map(([addr, len]) => Buffer.concat([u64(addr), u64(len), u64(addr), u64(len)])));
const writevBytes = Buffer.alloc(
  segments.reduce((n, [, len]) => n + Number(len), 0),
  0x5a,
);
const writev = tcpFrame({ op: TCP_OP.writev, id: 8n, addr: BigInt(segments.length), body: Buffer.concat([table, writevBytes]) });
save('tcp_frames', 'hello-writev', Buffer.concat([hello, writev, write]));
// WRITE_ROWS: a row table (width | pitch), then packed bytes [addr, +length - 16) of 40 rows
// of 100 bytes 256 apart; a second frame whose rows do not make its span (refused, drained).
const rowsFrame = (id, from, spanLength, bytes) =>
  tcpFrame({
    op: TCP_OP.writeRows,
    id,
    addr: from,
    body: Buffer.concat([u64(100n), u64(256n), Buffer.alloc(bytes, 0x6b)]),
    spanAddr: REGION + 4096n,
    spanLength,
  });
const rowsSpan = 39n * 256n + 100n;
save('tcp_frames', 'hello-write-rows', Buffer.concat([hello, rowsFrame(9n, 150n, rowsSpan, 2000), rowsFrame(10n, 0n, rowsSpan - 1n, 300), write]));
// Verified writes (header flag bit 0): the target digests what lands and answers with the digest.
const verified = (frame) => {
  const f = Buffer.from(frame);
  f[7] = 1;
  return f;
};
save('tcp_frames', 'hello-write-verified', Buffer.concat([hello, verified(write)]));
save('tcp_frames', 'hello-writev-verified', Buffer.concat([hello, verified(writev), verified(write)]));
save(
  'tcp_frames',
  'hello-write-rows-verified',
  Buffer.concat([hello, verified(rowsFrame(9n, 150n, rowsSpan, 2000)), verified(rowsFrame(10n, 0n, rowsSpan - 1n, 300)), verified(write)]),
);
save('tcp_frames', 'hello-all', Buffer.concat([hello, write, read, notify, read]));
save(
  'tcp_frames',
  'write-out-of-range',
  Buffer.concat([
    hello,
    tcpFrame({ op: TCP_OP.write, id: 5n, addr: REGION + (1n << 20n) - 8n, body: Buffer.alloc(64), spanAddr: REGION + (1n << 20n) - 8n, spanLength: 64n }),
  ]),
);
// REVOKE naming an unknown connection (answered 0), this very connection (refused), then a WRITE.
save(
  'tcp_frames',
  'hello-revoke',
  Buffer.concat([
    hello,
    tcpFrame({ op: TCP_OP.revoke, id: 6n, body: Buffer.alloc(16, 0x11) }),
    tcpFrame({ op: TCP_OP.revoke, id: 7n, body: Buffer.alloc(16, 0xab) }),
    write,
  ]),
);
save('tcp_frames', 'auth-without-hello', tcpFrame({ op: TCP_OP.auth, body: Buffer.alloc(32, 1) }));
save('tcp_frames', 'stale-epoch', tcpFrame({ op: TCP_OP.hello, addr: 5n, body: helloBody(7, Buffer.alloc(16), '') }));

// fabric control messages (native/fabric/src/wire.h, version 2): header then body.
function fabric({ type, flags = 0, status = 0, req = 1n, arg = 0n, body = Buffer.alloc(0), addr = Buffer.from('rail-address-0') }) {
  return Buffer.concat([
    u32(0x42464554),
    u16(2),
    Buffer.from([type, flags]),
    u16(0),
    u16(addr.length),
    u32(status),
    u64(req),
    u64(11),
    u64(22),
    u64(arg),
    addr,
    body,
  ]);
}
save('fabric_messages', 'hello', fabric({ type: 1, body: Buffer.concat([u16(4), Buffer.from('peer')]) }));
save(
  'fabric_messages',
  'table',
  fabric({
    type: 4,
    flags: 1,
    body: Buffer.concat([u16(2), u32(2), u64(0x1000), u64(4096), u64(0x1000), u64(1), u64(2), u64(0x9000), u64(64), u64(0x9000), u64(3), u64(4)]),
  }),
);
save('fabric_messages', 'notify', fabric({ type: 6, body: Buffer.concat([u16(4), Buffer.from('peer'), u32(5), Buffer.from('hello')]) }));
save('fabric_messages', 'revoke', fabric({ type: 5, arg: 0x1000n }));
save('fabric_messages', 'revoke-ack', fabric({ type: 7 }));
save('fabric_messages', 'notify-ack', fabric({ type: 8, req: 7n }));
save('fabric_messages', 'notify-ack-refused', fabric({ type: 8, req: 7n, status: 0xfffffece }));
// Hostile shapes the rails must refuse: a sender address of 0 bytes (the provider reads its
// fixed address length from it), a table without keys (nothing to address its regions with).
save('fabric_messages', 'hello-empty-address', fabric({ type: 1, addr: Buffer.alloc(0), body: Buffer.concat([u16(4), Buffer.from('peer')]) }));
save(
  'fabric_messages',
  'table-no-keys',
  fabric({ type: 4, flags: 1, body: Buffer.concat([u16(0), u32(2), u64(0x1000), u64(4096), u64(0x1000), u64(0x9000), u64(64), u64(0x9000)]) }),
);

// control plane: msgpack envelopes {v, id, type, body} as the engine and @te/disagg send them.
const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true, moreTypes: true });
const envelopes = {
  descriptor: { v: 1, id: 1, type: 'te.segment.describe' },
  ping: { v: 1, id: 2, type: 'te.kv.p.ping', body: { v: 1 } },
  register: {
    v: 1,
    id: 3,
    type: 'te.kv.p.register',
    body: { v: 1, room: 7n, segment: 'decode-0', tpRank: 0, buffers: { kv: [0x1000n], aux: [] }, pages: new Uint32Array([1, 2, 3]) },
  },
  request: { v: 1, id: 4, type: 'te.kv.p.request', body: { v: 1, room: 7n, pages: new Uint32Array([4, 5]), addrs: new BigUint64Array([0x2000n, 0x3000n]) } },
  abort: { v: 1, id: 5, type: 'te.kv.p.abort', body: { v: 1, room: 7n } },
  status: { v: 1, id: 6, type: 'te.kv.d.status', body: { v: 1, room: 7n, status: 4 } },
  ecPull: { v: 1, id: 7, type: 'te.ec.pull', body: { v: 1, items: [{ hash: 'abc', addr: 0x4000n, length: 1024 }] } },
  malformed: { v: { toString: 0 }, id: 8, type: 'x' },
};
for (const [k, v] of Object.entries(envelopes)) save('control_plane', k, packr.pack(v));
console.log('seed corpora written under', join(here, 'corpus'));
