// Two processes on loopback: bytes written and read are verified end to end.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, batchOf } from '@te/connector';
import { hash, KiB, localTransport, MiB, pattern, selfDescriptor, spawnTarget, type Local, type TargetProcess } from './helpers.js';

const SIZE = 80 * MiB;
let target: TargetProcess;
let local: Local;
let base: bigint;

test.before(async () => {
  target = await spawnTarget(SIZE);
  local = await localTransport(SIZE);
  base = BigInt(target.info.addr);
});
test.after(async () => {
  await local?.transport.close();
  await target?.call('exit').catch(() => {});
});

test('write then read 1 B … 64 MiB, every byte verified on both sides', async () => {
  const peer = await local.transport.openPeer(target.descriptor);
  let seed = 1;
  for (const size of [1, 7, 4 * KiB + 3, 64 * KiB, MiB + 1, 8 * MiB, 64 * MiB]) {
    const off = size < MiB ? 12345 : 0;
    const data = pattern(seed++, size);
    local.buffer.set(data, 0);
    const w = await local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: base + BigInt(off), length: size }]), { timeoutMs: 20000 });
    assert.equal(Array.from(w.statuses), [0]);
    assert.is(w.bytes, BigInt(size));
    assert.is(await target.call('hash', { offset: off, length: size }), hash(data), `write of ${size} B`);

    await target.call('fill', { seed: seed, offset: off, length: size });
    local.buffer.fill(0, 0, size);
    const r = await local.transport.submit(peer, batchOf([{ op: 'read', local: local.addr, remote: base + BigInt(off), length: size }]), { timeoutMs: 20000 });
    assert.equal(Array.from(r.statuses), [0]);
    assert.ok(Buffer.from(local.buffer.buffer, 0, size).equals(pattern(seed++, size)), `read of ${size} B`);
  }
  await local.transport.closePeer(peer);
});

test('a batch of 100k descriptors (scattered, reversed) writes and reads back exactly', async () => {
  const peer = await local.transport.openPeer(target.descriptor);
  const n = 100_000;
  const item = 48;
  const src = pattern(99, n * item);
  local.buffer.set(src, 0);
  const b = allocateBatch(n);
  const expected = Buffer.alloc(n * item);
  for (let i = 0; i < n; i++) {
    const j = n - 1 - i; // request i moves local item i to remote slot j
    b.opcodes[i] = 1;
    b.localAddrs[i] = local.addr + BigInt(i * item);
    b.remoteAddrs[i] = base + BigInt(j * item);
    b.lengths[i] = BigInt(item);
    src.copy(expected, j * item, i * item, (i + 1) * item);
  }
  const w = await local.transport.submit(peer, b, { timeoutMs: 30000 });
  assert.is(w.statuses.length, n);
  assert.ok(w.statuses.every((s) => s === 0));
  assert.is(w.bytes, BigInt(n * item));
  assert.is(await target.call('hash', { offset: 0, length: n * item }), hash(expected));

  // Read them back into a second local area, in the opposite mapping.
  const out = n * item;
  b.opcodes.fill(0);
  for (let i = 0; i < n; i++) b.localAddrs[i] = local.addr + BigInt(out + i * item);
  const r = await local.transport.submit(peer, b, { timeoutMs: 30000 });
  assert.ok(r.statuses.every((s) => s === 0));
  assert.ok(Buffer.from(local.buffer.buffer, out, n * item).equals(src));
  await local.transport.closePeer(peer);
});

test('concurrent batches from several callers land in their own regions', async () => {
  const peer = await local.transport.openPeer(target.descriptor);
  const callers = 8;
  const span = 2 * MiB;
  const jobs = Array.from({ length: callers }, async (_, c) => {
    const data = pattern(1000 + c, span);
    local.buffer.set(data, c * span);
    const reqs = [];
    for (let k = 0; k < 32; k++) {
      const o = k * (span / 32);
      reqs.push({ op: 'write' as const, local: local.addr + BigInt(c * span + o), remote: base + BigInt(c * span + o), length: span / 32 });
    }
    const r = await local.transport.submit(peer, batchOf(reqs), { timeoutMs: 20000 });
    assert.ok(r.statuses.every((s) => s === 0));
    return hash(data);
  });
  const hashes = await Promise.all(jobs);
  for (let c = 0; c < callers; c++) assert.is(await target.call('hash', { offset: c * span, length: span }), hashes[c]);
  await local.transport.closePeer(peer);
});

test('a notification arrives after every byte of its batch landed', async () => {
  const peer = await local.transport.openPeer(target.descriptor);
  const size = 16 * MiB;
  const data = pattern(4242, size);
  local.buffer.set(data, 0);
  const reqs = [];
  for (let k = 0; k < 16; k++) reqs.push({ op: 'write' as const, local: local.addr + BigInt(k * MiB), remote: base + BigInt(k * MiB), length: MiB });
  const payload = Buffer.from(JSON.stringify({ offset: 0, length: size }));
  await local.transport.submit(peer, batchOf(reqs), { timeoutMs: 20000, notify: payload });
  const notes = await target.call<{ from: string; payload: string; hash?: string }[]>('notifications');
  const last = notes.at(-1)!;
  assert.ok(last, 'notification delivered');
  assert.is(last.payload, payload.toString());
  assert.is(last.hash, hash(data), 'all data present when the notification was delivered');
  assert.match(last.from, /^initiator-/);
  await local.transport.closePeer(peer);
});

test('same-process target (same epoch) is a memcpy with the same validation', async () => {
  const peer = await local.transport.openPeer(selfDescriptor(local, target.descriptor));
  const data = pattern(7, MiB);
  local.buffer.set(data, 0);
  const r = await local.transport.submit(
    peer,
    batchOf([
      { op: 'write', local: local.addr, remote: local.addr + BigInt(4 * MiB), length: MiB },
      { op: 'write', local: local.addr, remote: local.addr + BigInt(SIZE) - 10n, length: 100 },
    ]),
    { timeoutMs: 5000 },
  );
  assert.equal(Array.from(r.statuses), [0, -2]);
  assert.ok(Buffer.from(local.buffer.buffer, 4 * MiB, MiB).equals(data));
  await local.transport.closePeer(peer);
});

test.run();
