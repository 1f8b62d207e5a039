// WRITEV frames (native/wire.h): runs of small writes of one batch travel as one frame, and
// each write still gets its own check and its own status. Both ends are tested apart: the
// real target against hand-built frames, and the real initiator against a recording target
// that speaks the wire by hand (so what the initiator sent is seen, not inferred).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, batchOf, NATIVE_STATUS } from '@te/connector';
import { hash, KiB, localTransport, MiB, pattern, spawnTarget, withLocalTransport, type Local, type TargetProcess } from './helpers.js';
import { recordingTarget } from './recording-target.js';
import { FEATURE_REVOKE, FEATURE_WRITEV, header, HEADER, hello, HELLO_ACK_BODY, OP, rawConnect, SEGMENT_ENTRY, writev } from './wire.js';

const SIZE = 8 * MiB;
let target: TargetProcess;
let base: bigint;

test.before(async () => {
  target = await spawnTarget(SIZE);
  base = BigInt(target.info.addr);
});
test.after(async () => {
  await target?.call('exit').catch(() => {});
});

async function readyConn() {
  const c = await rawConnect((target.info.endpoint as { port: number }).port);
  c.socket.write(hello(BigInt(target.info.epoch)));
  const ack = (await c.read(HEADER + HELLO_ACK_BODY))!;
  return { c, features: ack[HEADER + 17]! };
}

test('the target announces WRITEV and applies each segment as its own WRITE', async () => {
  await target.call('zero');
  const { c, features } = await readyConn();
  assert.ok((features & FEATURE_WRITEV) !== 0, 'HELLO_ACK carries the WRITEV feature');
  assert.ok((features & FEATURE_REVOKE) !== 0);
  const a = pattern(1, 5000);
  const b = pattern(2, 40 * KiB);
  const bad = pattern(3, 300);
  const d = pattern(4, 64 * KiB);
  const segs = [
    { addr: base + 100n, data: a },
    { addr: base + 1n * BigInt(MiB), data: b },
    { addr: base + BigInt(SIZE) - 100n, data: bad }, // crosses the region's end: refused, drained
    { addr: base + 3n * BigInt(MiB), data: d },
  ];
  c.socket.write(writev(11n, segs));
  const r = (await c.read(HEADER))!;
  assert.is(r[6], OP.WRITEV | OP.RESPONSE);
  assert.is(r.readBigUInt64LE(16), 11n);
  assert.is(r.readInt32LE(8), NATIVE_STATUS.ADDRESS_OUT_OF_RANGE, 'the status is the first failure');
  assert.is(r.readBigUInt64LE(32), 16n, 'one status per segment follows');
  const statuses = (await c.read(16))!;
  assert.equal(
    [0, 1, 2, 3].map((i) => statuses.readInt32LE(4 * i)),
    [0, 0, NATIVE_STATUS.ADDRESS_OUT_OF_RANGE, 0],
  );
  assert.is(await target.call('hash', { offset: 100, length: a.length }), hash(a));
  assert.is(await target.call('hash', { offset: MiB, length: b.length }), hash(b));
  assert.is(await target.call('hash', { offset: 3 * MiB, length: d.length }), hash(d));
  assert.is(await target.call('hash', { offset: SIZE - 100, length: 100 }), hash(new Uint8Array(100)), 'no byte of the refused segment landed');

  // All accepted: status 0, no body; the connection goes on serving.
  const e = pattern(5, 4 * KiB);
  const f = pattern(6, 4 * KiB);
  c.socket.write(
    writev(12n, [
      { addr: base + 5n * BigInt(MiB), data: e },
      { addr: base + 6n * BigInt(MiB), data: f },
    ]),
  );
  const r2 = (await c.read(HEADER))!;
  assert.is(r2.readInt32LE(8), 0);
  assert.is(r2.readBigUInt64LE(32), 0n);
  assert.is(await target.call('hash', { offset: 5 * MiB, length: e.length }), hash(e));
  assert.is(await target.call('hash', { offset: 6 * MiB, length: f.length }), hash(f));
  c.socket.destroy();
});

test('malformed WRITEV frames close the connection and write nothing', async () => {
  await target.call('zero');
  const zeros = hash(new Uint8Array(SIZE));
  const seg = (addr: bigint, length: bigint) => {
    const e = Buffer.alloc(SEGMENT_ENTRY);
    e.writeBigUInt64LE(addr, 0);
    e.writeBigUInt64LE(length, 8);
    return e;
  };
  const cases: [string, Buffer][] = [
    ['no segments', header(OP.WRITEV, { addr: 0n, length: 0n })],
    ['65 segments', Buffer.concat([header(OP.WRITEV, { addr: 65n, length: 65n * 32n + 65n }), ...Array.from({ length: 65 }, () => seg(base, 1n))])],
    ['a body shorter than its table', header(OP.WRITEV, { addr: 4n, length: 64n })],
    ['segments longer than the body', Buffer.concat([header(OP.WRITEV, { addr: 1n, length: 32n + 8n }), seg(base, 16n), Buffer.alloc(8, 0xee)])],
    ['segments shorter than the body', Buffer.concat([header(OP.WRITEV, { addr: 1n, length: 32n + 16n }), seg(base, 8n), Buffer.alloc(16, 0xee)])],
    ['an empty segment', Buffer.concat([header(OP.WRITEV, { addr: 2n, length: 64n + 8n }), seg(base, 0n), seg(base, 8n), Buffer.alloc(8, 0xee)])],
    ['a huge segment', Buffer.concat([header(OP.WRITEV, { addr: 1n, length: 32n + 8n }), seg(base, 1n << 62n), Buffer.alloc(8, 0xee)])],
  ];
  for (const [what, frame] of cases) {
    const { c } = await readyConn();
    c.socket.write(frame);
    assert.ok(await c.closed(2000), `${what}: the connection is closed`);
  }
  assert.is(await target.call('hash', { offset: 0, length: SIZE }), zeros, 'the target memory is unchanged');
});

/** A batch of `n` 4 KiB writes to scattered addresses of the recording target's buffer. */
function scattered(local: Local, n: number) {
  const b = allocateBatch(n);
  for (let i = 0; i < n; i++) {
    b.opcodes[i] = 1;
    b.localAddrs[i] = local.addr + BigInt(i * 4096);
    b.remoteAddrs[i] = (1n << 40n) + BigInt(((i * 7919) % n) * 8192);
    b.lengths[i] = 4096n;
  }
  return b;
}

test('the initiator sends runs of small writes as WRITEV frames and maps each segment status to its request', async () => {
  const n = 300;
  const refused = new Set([(1n << 40n) + BigInt(((17 * 7919) % n) * 8192), (1n << 40n) + BigInt(((250 * 7919) % n) * 8192)]);
  const peerTarget = await recordingTarget(FEATURE_REVOKE | FEATURE_WRITEV, (a) => refused.has(a));
  const local = await localTransport(4 * MiB);
  try {
    const peer = await local.transport.openPeer(peerTarget.descriptor);
    const r = await local.transport.submit(peer, scattered(local, n), { timeoutMs: 10_000 });
    const expected = Array.from({ length: n }, (_, i) => (i === 17 || i === 250 ? NATIVE_STATUS.ADDRESS_OUT_OF_RANGE : 0));
    assert.equal(Array.from(r.statuses), expected, 'each request has its own segment status');
    const v = peerTarget.frames.filter((f) => f.op === OP.WRITEV);
    assert.ok(v.length > 0 && v.length <= Math.ceil(n / 2), `writes travelled in WRITEV frames (${v.length} of ${peerTarget.frames.length} frames)`);
    assert.ok(
      v.every((f) => f.segments.length >= 2 && f.segments.length <= 64),
      'every WRITEV frame carries 2..64 segments',
    );
    const sent = peerTarget.frames.flatMap((f) => f.segments.map((s) => s.addr)).sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    const want = Array.from({ length: n }, (_, i) => (1n << 40n) + BigInt(((i * 7919) % n) * 8192)).sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    assert.equal(sent, want, 'every write was sent exactly once');
  } finally {
    await local.transport.close();
    await peerTarget.close();
  }
});

test('a target without the WRITEV feature, or coalesceWrites off, gets one WRITE frame per write', async () => {
  for (const [features, options] of [
    [FEATURE_REVOKE, {}],
    [FEATURE_REVOKE | FEATURE_WRITEV, { coalesceWrites: false }],
  ] as const) {
    const peerTarget = await recordingTarget(features, () => false);
    const local = await localTransport(4 * MiB, options);
    try {
      const peer = await local.transport.openPeer(peerTarget.descriptor);
      const r = await local.transport.submit(peer, scattered(local, 100), { timeoutMs: 10_000 });
      assert.ok(r.statuses.every((s) => s === 0));
      assert.is(peerTarget.frames.length, 100);
      assert.ok(peerTarget.frames.every((f) => f.op === OP.WRITE));
    } finally {
      await local.transport.close();
      await peerTarget.close();
    }
  }
});

// A batch of at most one slice's bytes goes out on one lane, as one frame with one answer;
// the lanes take turns batch by batch. A larger batch is still spread over every lane.
test('a batch within one slice travels on one lane as one frame, lanes taking turns; a larger batch uses every lane', async () => {
  const peerTarget = await recordingTarget(FEATURE_REVOKE | FEATURE_WRITEV, () => false);
  const local = await localTransport(4 * MiB, { lanesPerPeer: 2, sliceSize: MiB });
  const batchOf = (n: number, size: number) => {
    const b = allocateBatch(n);
    for (let i = 0; i < n; i++) {
      b.opcodes[i] = 1;
      b.localAddrs[i] = local.addr + BigInt(i * size);
      b.remoteAddrs[i] = (1n << 40n) + BigInt(i * size);
      b.lengths[i] = BigInt(size);
    }
    return b;
  };
  try {
    const peer = await local.transport.openPeer(peerTarget.descriptor);
    const lanes: number[] = [];
    for (let k = 0; k < 4; k++) {
      const before = peerTarget.frames.length;
      const r = await local.transport.submit(peer, batchOf(4, 64 * 1024), { timeoutMs: 10_000 });
      assert.ok(r.statuses.every((s) => s === 0));
      const frames = peerTarget.frames.slice(before);
      assert.is(frames.length, 1, `batch ${k}: four 64 KiB writes in one frame (${frames.length} frames)`);
      assert.is(frames[0]!.segments.length, 4);
      lanes.push(frames[0]!.connection);
    }
    assert.is(new Set(lanes).size, 2, `the batches took turns on both lanes (${lanes})`);
    const before = peerTarget.frames.length;
    const r = await local.transport.submit(peer, batchOf(8, 256 * 1024), { timeoutMs: 10_000 });
    assert.ok(r.statuses.every((s) => s === 0));
    assert.is(new Set(peerTarget.frames.slice(before).map((f) => f.connection)).size, 2, '2 MiB in one batch went over both lanes');
  } finally {
    await local.transport.close();
    await peerTarget.close();
  }
});

test('coalesced writes between two real transports land byte-exact, refused ones alone fail', async () => {
  await target.call('zero');
  await withLocalTransport(4 * MiB, {}, async (local) => {
    const peer = await local.transport.openPeer(target.descriptor);
    const n = 500;
    const item = 3000;
    const src = pattern(77, n * item);
    local.buffer.set(src, 0);
    const b = allocateBatch(n);
    const expected = Buffer.alloc(n * item);
    for (let i = 0; i < n; i++) {
      const j = (i * 131) % n;
      b.opcodes[i] = 1;
      b.localAddrs[i] = local.addr + BigInt(i * item);
      b.remoteAddrs[i] = i === 123 ? base + BigInt(SIZE) - 10n : base + BigInt(j * item);
      b.lengths[i] = BigInt(item);
      if (i !== 123) src.copy(expected, j * item, i * item, (i + 1) * item);
    }
    const r = await local.transport.submit(peer, b, { timeoutMs: 10_000 });
    assert.equal(
      Array.from(r.statuses),
      Array.from({ length: n }, (_, i) => (i === 123 ? NATIVE_STATUS.ADDRESS_OUT_OF_RANGE : 0)),
    );
    assert.is(r.bytes, BigInt((n - 1) * item));
    assert.is(await target.call('hash', { offset: 0, length: n * item }), hash(expected));
    assert.is(await target.call('hash', { offset: SIZE - 10, length: 10 }), hash(new Uint8Array(10)));
    const one = await local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: base, length: 8 }]), { timeoutMs: 5000 });
    assert.equal(Array.from(one.statuses), [0], 'the connection still serves');
  });
});

test.run();
