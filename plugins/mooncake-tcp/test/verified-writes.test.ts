// Verified writes (TransferBatch.verifyWrites; wire.h, kFlagDigest): every write shape lands
// byte-exact at a target process with its digests compared; a byte flipped on the wire (a
// proxy between the two processes) fails the verified write with DATA_CORRUPTED, where the
// same write unverified reports success on the wrong byte; a target that answers a wrong
// digest, none, or does not verify at all is caught.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { allocateBatch, NATIVE_STATUS, type SegmentDescriptor, type TransferBatch } from '@te/connector';
import { hash, localTransport, MiB, pattern, rejectsWith, selfDescriptor, spawnTarget, withLocalTransport, type TargetProcess } from './helpers.js';
import { FEATURE_REVOKE, FEATURE_ROWS, FEATURE_WRITEV } from './wire.js';
import { recordingTarget } from './recording-target.js';

const SIZE = 16 * MiB;
let target: TargetProcess;
let base: bigint;

test.before(async () => {
  target = await spawnTarget(SIZE);
  base = BigInt(target.info.addr);
});
test.after(async () => {
  await target?.call('exit').catch(() => {});
});

interface Write {
  at: number;
  to: number;
  length: number;
  /** Local rows (a gathered write): rows of length / rows bytes, `pitch` apart. */
  gather?: { rows: number; pitch: number };
  /** Remote rows (a scattered write). */
  scatter?: { rows: number; pitch: number };
}

/** The batch, and what the target's memory holds after it (from `src`, the local bytes). */
function batchOf(localAddr: bigint, writes: Write[], src: Uint8Array): { batch: TransferBatch; expected: Uint8Array } {
  const b = allocateBatch(writes.length);
  b.verifyWrites = true;
  const expected = new Uint8Array(SIZE);
  if (writes.some((w) => w.gather)) [b.localRows, b.localPitches] = [new Uint32Array(writes.length).fill(1), new BigUint64Array(writes.length)];
  if (writes.some((w) => w.scatter)) [b.remoteRows, b.remotePitches] = [new Uint32Array(writes.length).fill(1), new BigUint64Array(writes.length)];
  writes.forEach((w, i) => {
    b.opcodes[i] = 1;
    b.localAddrs[i] = localAddr + BigInt(w.at);
    b.remoteAddrs[i] = base + BigInt(w.to);
    b.lengths[i] = BigInt(w.length);
    const rows = w.gather?.rows ?? w.scatter?.rows ?? 1;
    const width = w.length / rows;
    if (w.gather) [b.localRows![i], b.localPitches![i]] = [w.gather.rows, BigInt(w.gather.pitch)];
    if (w.scatter) [b.remoteRows![i], b.remotePitches![i]] = [w.scatter.rows, BigInt(w.scatter.pitch)];
    for (let r = 0; r < rows; r++) {
      const from = w.at + r * (w.gather?.pitch ?? width);
      expected.set(src.subarray(from, from + width), w.to + r * (w.scatter?.pitch ?? width));
    }
  });
  return { batch: b, expected };
}

/** Every shape of write mooncake-tcp sends: its own frames, WRITEV segments, packed and per-row gathers, both kinds of WRITE_ROWS. */
function shapes(): Write[] {
  return [
    { at: 0, to: 0, length: 3 * MiB + 12345 }, // slices of its own, the last one short
    ...Array.from({ length: 20 }, (_, k) => ({ at: 4 * MiB + k * 65536, to: 4 * MiB + k * 65536, length: 60000 + k })), // WRITEV segments
    { at: 6 * MiB + 512, to: 6 * MiB, length: 512 * 1024, gather: { rows: 1024, pitch: 1024 } }, // narrow rows: packed
    { at: 7 * MiB, to: 7 * MiB, length: 8 * 8192, gather: { rows: 8, pitch: 12000 } }, // wide rows: an iovec each
    { at: 8 * MiB, to: 8 * MiB + 512, length: 256 * 1024, scatter: { rows: 512, pitch: 1024 } }, // narrow rows at the target: its bounce buffer
    { at: 9 * MiB, to: 9 * MiB, length: 4 * 8192, scatter: { rows: 4, pitch: 9000 } }, // wide rows at the target: in place
    { at: 10 * MiB, to: 10 * MiB, length: 0 }, // empty
  ];
}

for (const options of [{}, { coalesceWrites: false, sliceSize: 256 * 1024 }, { socketBufferBytes: 4096 }]) {
  test(`verified writes of every shape land byte-exact with their digests compared (${JSON.stringify(options)})`, async () => {
    await target.call('zero');
    await withLocalTransport(SIZE, options, async (local) => {
      const src = pattern(31, SIZE);
      local.buffer.set(src);
      const { batch, expected } = batchOf(local.addr, shapes(), src);
      const peer = await local.transport.openPeer(target.descriptor);
      const r = await local.transport.submit(peer, batch, { timeoutMs: 30_000 });
      assert.equal(Array.from(r.statuses), new Array(batch.opcodes.length).fill(0));
      assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(expected));
    });
  });
}

/**
 * A TCP proxy to the target that flips one byte of what the initiator sends, `at` bytes into
 * each connection's stream (past the handshake: inside a write's body).
 */
async function flippingProxy(port: number, at: number): Promise<{ port: number; flipped: () => number; close(): Promise<void> }> {
  let flipped = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    let seen = 0;
    client.on('data', (d: Buffer) => {
      if (seen <= at && at < seen + d.length) {
        d[at - seen]! ^= 0x40;
        flipped++;
      }
      seen += d.length;
      upstream.write(d);
    });
    upstream.on('data', (d) => client.write(d));
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    flipped: () => flipped,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

function via(d: SegmentDescriptor, port: number): SegmentDescriptor {
  const t = d.transports['mooncake-tcp']!;
  return { ...d, transports: { 'mooncake-tcp': { ...t, endpoint: { ...(t.endpoint as object), port } } } };
}

for (const verify of [true, false]) {
  test(`a byte flipped on the wire: ${verify ? 'the verified write fails with DATA_CORRUPTED' : 'unverified, the write reports success on the wrong byte'}`, async () => {
    await target.call('zero');
    const proxy = await flippingProxy(Number((target.descriptor.transports['mooncake-tcp']!.endpoint as { port: number }).port), MiB + 500_000);
    const local = await localTransport(SIZE, { lanesPerPeer: 1 });
    try {
      const src = pattern(32, SIZE);
      local.buffer.set(src);
      // Four 1 MiB writes on one connection: the flip lands in the second one's body.
      const { batch, expected } = batchOf(
        local.addr,
        [0, 1, 2, 3].map((k) => ({ at: k * MiB, to: k * MiB, length: MiB })),
        src,
      );
      batch.verifyWrites = verify;
      const peer = await local.transport.openPeer(via(target.descriptor, proxy.port));
      const r = await local.transport.submit(peer, batch, { timeoutMs: 30_000 });
      assert.is(proxy.flipped(), 1);
      const landed = await target.call('hash', { offset: 0, length: 4 * MiB });
      assert.is.not(landed, hash(expected.subarray(0, 4 * MiB)), 'the proxy changed a byte that landed');
      if (verify) {
        assert.equal(Array.from(r.statuses), [0, NATIVE_STATUS.DATA_CORRUPTED, 0, 0]);
        assert.is(r.bytes, 3n * BigInt(MiB)); // the corrupted write's bytes are not counted
      } else {
        assert.equal(Array.from(r.statuses), [0, 0, 0, 0]);
      }
    } finally {
      await local.transport.close();
      await proxy.close();
    }
  });
}

test('a target answering a wrong digest fails the write with DATA_CORRUPTED; one answering none, with BAD_FRAME', async () => {
  for (const answer of ['wrong', 'none'] as const) {
    const t = await recordingTarget(FEATURE_REVOKE | FEATURE_WRITEV | FEATURE_ROWS | 8, () => false, { digest: answer });
    const local = await localTransport(MiB);
    try {
      const b = allocateBatch(1);
      b.verifyWrites = true;
      [b.opcodes[0], b.localAddrs[0], b.remoteAddrs[0], b.lengths[0]] = [1, local.addr, 1n << 40n, 4096n];
      const peer = await local.transport.openPeer(t.descriptor);
      if (answer === 'wrong') {
        const r = await local.transport.submit(peer, b, { timeoutMs: 10_000 });
        assert.equal(Array.from(r.statuses), [NATIVE_STATUS.DATA_CORRUPTED]);
      } else {
        const e = await rejectsWith(local.transport.submit(peer, b, { timeoutMs: 10_000 }), 'BAD_FRAME');
        assert.match(e.message, /without its digest/);
      }
    } finally {
      await local.transport.close();
      await t.close();
    }
  }
});

test('a target without digests (an earlier build) refuses verified writes unsent: UNSUPPORTED_OPERATION', async () => {
  const t = await recordingTarget(FEATURE_REVOKE | FEATURE_WRITEV | FEATURE_ROWS, () => false);
  const local = await localTransport(MiB);
  try {
    const b = allocateBatch(2);
    b.verifyWrites = true;
    for (let i = 0; i < 2; i++) [b.opcodes[i], b.localAddrs[i], b.remoteAddrs[i], b.lengths[i]] = [1, local.addr, (1n << 40n) + BigInt(i * 4096), 4096n];
    const peer = await local.transport.openPeer(t.descriptor);
    const r = await local.transport.submit(peer, b, { timeoutMs: 10_000 });
    assert.equal(Array.from(r.statuses), [NATIVE_STATUS.UNSUPPORTED_OPERATION, NATIVE_STATUS.UNSUPPORTED_OPERATION]);
    assert.is(t.frames.length, 0);
  } finally {
    await local.transport.close();
    await t.close();
  }
});

test('verifyWrites is refused on a batch with reads, and on a transport that does not verify', async () => {
  await withLocalTransport(MiB, {}, async (local) => {
    const peer = await local.transport.openPeer(target.descriptor);
    const b = allocateBatch(1);
    [b.opcodes[0], b.localAddrs[0], b.remoteAddrs[0], b.lengths[0]] = [0, local.addr, base, 4096n];
    b.verifyWrites = true;
    await rejectsWith(local.transport.submit(peer, b, { timeoutMs: 10_000 }), 'INVALID_ARGUMENT');
  });
});

test('same process: a verified write is one copy in this process and lands', async () => {
  await withLocalTransport(4 * MiB, {}, async (local) => {
    const src = pattern(33, 2 * MiB);
    local.buffer.set(src);
    const peer = await local.transport.openPeer(selfDescriptor(local, target.descriptor));
    const b = allocateBatch(1);
    b.verifyWrites = true;
    [b.opcodes[0], b.localAddrs[0], b.remoteAddrs[0], b.lengths[0]] = [1, local.addr, local.addr + BigInt(2 * MiB), BigInt(2 * MiB)];
    const r = await local.transport.submit(peer, b, { timeoutMs: 10_000 });
    assert.equal(Array.from(r.statuses), [0]);
    assert.is(hash(local.buffer.subarray(2 * MiB)), hash(src));
  });
});

test.run();
