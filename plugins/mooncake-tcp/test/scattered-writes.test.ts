// Scattered writes (TransferBatch.remoteRows): a write whose bytes land as strided rows at the
// target travels as a WRITE_ROWS frame, and the target receives it straight into the rows.
// Checked end to end against a target process (odd shapes, slices that start inside a row,
// rows on both sides), against hand-built frames (a malformed row table is refused and its
// bytes drained, the connection serving on), and on the same-process path.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, NATIVE_STATUS, type TransferBatch } from '@te/connector';
import { hash, localTransport, MiB, pattern, selfDescriptor, spawnTarget, withLocalTransport, type Local, type TargetProcess } from './helpers.js';
import { recordingTarget } from './recording-target.js';
import { FEATURE_REVOKE, FEATURE_ROWS, FEATURE_WRITEV, HEADER, hello, HELLO_ACK_BODY, OP, rawConnect, writeRows } from './wire.js';

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

/** One write: `rows` rows of `width` bytes landing `pitch` apart from target offset `to`; gathered locally when `from` is given. */
interface Scatter {
  at: number;
  rows: number;
  width: number;
  pitch: number;
  to: number;
  /** Local rows' pitch (a write that gathers and scatters at once). */
  from?: number;
}

/** The batch, and what the target's memory must hold after it (from `src`, the local bytes). */
function scatterBatch(local: Local, writes: Scatter[], src: Uint8Array): { batch: TransferBatch; expected: Uint8Array } {
  const b = allocateBatch(writes.length);
  b.remoteRows = new Uint32Array(writes.length);
  b.remotePitches = new BigUint64Array(writes.length);
  b.localRows = new Uint32Array(writes.length).fill(1);
  b.localPitches = new BigUint64Array(writes.length);
  const expected = new Uint8Array(SIZE);
  writes.forEach((w, i) => {
    b.opcodes[i] = 1;
    b.localAddrs[i] = local.addr + BigInt(w.at);
    b.remoteAddrs[i] = base + BigInt(w.to);
    b.lengths[i] = BigInt(w.rows * w.width);
    b.remoteRows![i] = w.rows;
    b.remotePitches![i] = BigInt(w.pitch);
    if (w.from !== undefined) {
      b.localRows![i] = w.rows;
      b.localPitches![i] = BigInt(w.from);
    }
    for (let r = 0; r < w.rows; r++) {
      const s = w.at + r * (w.from ?? w.width);
      expected.set(src.subarray(s, s + w.width), w.to + r * w.pitch);
    }
  });
  return { batch: b, expected };
}

/** Head slices into NHD pages (TP 4 → 2: 512-byte rows, 1 KiB apart), odd shapes, and rows on both sides. */
function shapes(): Scatter[] {
  const out: Scatter[] = [];
  for (let page = 0; page < 40; page++) out.push({ at: page * 32 * 1024, rows: 64, width: 512, pitch: 1024, to: page * 64 * 1024 + 512 });
  for (let k = 0; k < 20; k++) out.push({ at: 3 * MiB + k * 9000, rows: 5 + k, width: 3 + k * 11, pitch: 3 + k * 11 + 17, to: 3 * MiB + k * 9000 });
  out.push({ at: 4 * MiB, rows: 3000, width: 16, pitch: 48, to: 4 * MiB }); // more rows than one receive takes
  out.push({ at: 5 * MiB, rows: 2, width: 300 * 1024, pitch: 400 * 1024, to: 5 * MiB }); // rows larger than a slice
  out.push({ at: 6.25 * MiB, rows: 400, width: 1000, pitch: 1300, to: 6.25 * MiB }); // narrow rows past the target's 256 KiB bounce buffer
  out.push({ at: 6 * MiB, rows: 100, width: 256, pitch: 1024, to: 6 * MiB, from: 768 }); // gathered and scattered
  out.push({ at: 7 * MiB, rows: 1, width: 4096, pitch: 4096, to: 7 * MiB }); // rows 1: an ordinary write
  return out;
}

for (const coalesceWrites of [true, false]) {
  test(`scattered writes land in their rows, byte-exact, at a target process (coalesceWrites: ${coalesceWrites})`, async () => {
    await target.call('zero');
    await withLocalTransport(SIZE, { coalesceWrites, sliceSize: 256 * 1024 }, async (local) => {
      const src = pattern(coalesceWrites ? 41 : 42, SIZE);
      local.buffer.set(src);
      const { batch, expected } = scatterBatch(local, shapes(), src);
      const peer = await local.transport.openPeer(target.descriptor);
      const r = await local.transport.submit(peer, batch, { timeoutMs: 20_000 });
      assert.equal(Array.from(r.statuses), new Array(batch.opcodes.length).fill(0));
      // Every byte of the target: the rows where they were written, zeros between and elsewhere.
      assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(expected));
    });
  });
}

test('a malformed or unregistered scatter fails its own request; the others land', async () => {
  await target.call('zero');
  await withLocalTransport(2 * MiB, {}, async (local) => {
    const src = pattern(51, 2 * MiB);
    local.buffer.set(src);
    const good: Scatter = { at: 0, rows: 8, width: 100, pitch: 256, to: 0 };
    const { batch } = scatterBatch(local, [good, good, good, good], src);
    const at = (i: number, w: Partial<Scatter>, op = 1) => {
      const m = { ...good, ...w };
      batch.opcodes[i] = op;
      batch.remoteAddrs[i] = base + BigInt(m.to);
      batch.remoteRows![i] = m.rows;
      batch.remotePitches![i] = BigInt(m.pitch);
    };
    at(1, { to: SIZE - 1000 }); // the last rows lie past the target's registered memory
    at(2, { pitch: 50 }); // rows overlap
    at(3, {}, 0); // a read does not scatter
    const peer = await local.transport.openPeer(target.descriptor);
    const r = await local.transport.submit(peer, batch, { timeoutMs: 5000 });
    assert.is(r.statuses[0], 0);
    assert.is(r.statuses[1], NATIVE_STATUS.ADDRESS_OUT_OF_RANGE);
    assert.is(r.statuses[2], NATIVE_STATUS.INVALID_ARGUMENT);
    assert.is(r.statuses[3], NATIVE_STATUS.INVALID_ARGUMENT);
    const expected = new Uint8Array(SIZE);
    for (let row = 0; row < 8; row++) expected.set(src.subarray(row * 100, row * 100 + 100), row * 256);
    assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(expected), 'only the good rows were written');
  });
});

test('the target announces WRITE_ROWS, refuses a malformed row table and drains its bytes, and serves on', async () => {
  await target.call('zero');
  const c = await rawConnect((target.info.endpoint as { port: number }).port);
  try {
    c.socket.write(hello(BigInt(target.info.epoch)));
    const ack = (await c.read(HEADER + HELLO_ACK_BODY))!;
    assert.ok((ack[HEADER + 17]! & FEATURE_ROWS) !== 0, 'HELLO_ACK carries the WRITE_ROWS feature');
    const data = pattern(61, 4000);
    const rows = { spanAddr: base + 4096n, spanLength: 9n * 1024n + 500n, width: 500n, pitch: 1024n }; // 10 rows of 500 bytes
    const cases: { name: string; frame: Partial<Parameters<typeof writeRows>[1]>; status: number }[] = [
      { name: 'pitch under the width', frame: { pitch: 400n }, status: NATIVE_STATUS.INVALID_ARGUMENT },
      { name: 'a span that is not whole rows', frame: { spanLength: 9n * 1024n + 499n }, status: NATIVE_STATUS.INVALID_ARGUMENT },
      { name: 'width 0', frame: { width: 0n }, status: NATIVE_STATUS.INVALID_ARGUMENT },
      { name: 'bytes past the rows', frame: { from: 1001n }, status: NATIVE_STATUS.INVALID_ARGUMENT },
      { name: 'a span past the region', frame: { spanAddr: base + BigInt(SIZE) - 1024n }, status: NATIVE_STATUS.ADDRESS_OUT_OF_RANGE },
    ];
    let id = 100n;
    for (const k of cases) {
      c.socket.write(writeRows(++id, { from: 0n, ...rows, data, ...k.frame }));
      const r = (await c.read(HEADER))!;
      assert.is(r[6], OP.WRITE_ROWS | OP.RESPONSE, k.name);
      assert.is(r.readBigUInt64LE(16), id, k.name);
      assert.is(r.readInt32LE(8), k.status, k.name);
    }
    assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(new Uint8Array(SIZE)), 'no refused byte landed');
    // Then a good one on the same connection: packed bytes [1000, 5000) of the 10 rows.
    c.socket.write(writeRows(++id, { from: 1000n, ...rows, data }));
    const r = (await c.read(HEADER))!;
    assert.is(r.readInt32LE(8), 0);
    const expected = new Uint8Array(SIZE);
    for (let at = 1000; at < 5000; at++) expected[4096 + Math.floor(at / 500) * 1024 + (at % 500)] = data[at - 1000]!;
    assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(expected));
  } finally {
    c.socket.destroy();
  }
});

test('a WRITE_ROWS header whose body cannot hold its row table closes the connection', async () => {
  const c = await rawConnect((target.info.endpoint as { port: number }).port);
  try {
    c.socket.write(hello(BigInt(target.info.epoch)));
    await c.read(HEADER + HELLO_ACK_BODY);
    const frame = writeRows(1n, { from: 0n, spanAddr: base, spanLength: 2048n, width: 1024n, pitch: 1024n, data: new Uint8Array(0) });
    frame.writeBigUInt64LE(16n, 32); // length: the table alone, no bytes
    c.socket.write(frame.subarray(0, HEADER));
    assert.ok(await c.closed(3000), 'a malformed frame closes its connection');
  } finally {
    c.socket.destroy();
  }
});

test('a target without the WRITE_ROWS feature (an earlier build): the scattered write fails UNSUPPORTED_OPERATION unsent, the plain one lands', async () => {
  const peerTarget = await recordingTarget(FEATURE_REVOKE | FEATURE_WRITEV, () => false);
  const local = await localTransport(MiB);
  try {
    const b = allocateBatch(2);
    b.opcodes.fill(1);
    b.localAddrs[0] = local.addr;
    b.localAddrs[1] = local.addr + 8192n;
    b.remoteAddrs[0] = 1n << 40n;
    b.remoteAddrs[1] = (1n << 40n) + 65536n;
    b.lengths.fill(4096n);
    b.remoteRows = Uint32Array.of(1, 8);
    b.remotePitches = BigUint64Array.of(0n, 1024n);
    const peer = await local.transport.openPeer(peerTarget.descriptor);
    const r = await local.transport.submit(peer, b, { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [0, NATIVE_STATUS.UNSUPPORTED_OPERATION]);
    assert.equal(
      peerTarget.frames.map((f) => f.op),
      [OP.WRITE],
      'only the plain write went out',
    );
  } finally {
    await local.transport.close();
    await peerTarget.close();
  }
});

test('the same-process path scatters rows as the wire does', async () => {
  await withLocalTransport(SIZE, {}, async (local) => {
    const peer = await local.transport.openPeer(selfDescriptor(local, target.descriptor));
    const src = pattern(71, 4 * MiB);
    local.buffer.set(src);
    const b = allocateBatch(1);
    b.opcodes[0] = 1;
    b.localAddrs[0] = local.addr + 512n;
    b.remoteAddrs[0] = local.addr + BigInt(5 * MiB);
    b.lengths[0] = BigInt(1000 * 512);
    b.remoteRows = Uint32Array.of(1000);
    b.remotePitches = BigUint64Array.of(1024n);
    const before = Buffer.from(local.buffer.subarray(5 * MiB, 6 * MiB));
    const r = await local.transport.submit(peer, b, { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [0]);
    const expected = Buffer.from(before);
    for (let row = 0; row < 1000; row++) expected.set(src.subarray(512 + row * 512, 512 + row * 512 + 512), row * 1024);
    assert.ok(Buffer.from(local.buffer.buffer, local.buffer.byteOffset + 5 * MiB, MiB).equals(expected), 'rows landed, the gaps untouched');
  });
});

test.run();
