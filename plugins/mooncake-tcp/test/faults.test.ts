// Hostile frames, bad ranges, authentication, dead/stopped/restarted peers, abort: each
// with its typed error code, and the target still serving afterwards.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, NATIVE_STATUS } from '@te/connector';
import { bytesQueuedTo, stopProcess, until } from '@te/testkit';
import { hash, localTransport, MiB, pattern, rejectsWith, spawnTarget, type Local, type TargetProcess } from './helpers.js';
import { header, HEADER, hello, OP, rawConnect, HELLO_ACK_BODY } from './wire.js';

let target: TargetProcess;
let local: Local;
let base: bigint;
const SIZE = 8 * MiB;

async function healthy(t: TargetProcess, l: Local) {
  const peer = await l.transport.openPeer(t.descriptor);
  const data = pattern(Math.floor(Math.random() * 1e9), 64 * 1024);
  l.buffer.set(data, 0);
  const r = await l.transport.submit(peer, batchOf([{ op: 'write', local: l.addr, remote: BigInt(t.info.addr) + 4096n, length: data.length }]), {
    timeoutMs: 5000,
  });
  assert.equal(Array.from(r.statuses), [0]);
  assert.is(await t.call('hash', { offset: 4096, length: data.length }), hash(data), 'target still serves');
  await l.transport.closePeer(peer);
}

test.before(async () => {
  target = await spawnTarget(SIZE);
  local = await localTransport(64 * MiB);
  base = BigInt(target.info.addr);
});
test.after(async () => {
  await local?.transport.close();
  await target?.call('exit').catch(() => {});
});

test('out-of-range and unregistered targets get precise statuses and nothing is applied', async () => {
  await target.call('zero');
  const before = await target.call('hash', { offset: 0, length: SIZE });
  const localOnly = BigInt(await target.call<string>('register', { size: 4096, remote: false }));
  const peer = await local.transport.openPeer(target.descriptor);
  local.buffer.set(pattern(5, 2 * MiB), 0);
  const r = await local.transport.submit(
    peer,
    batchOf([
      { op: 'write', local: local.addr, remote: base + BigInt(SIZE) - 100n, length: 200 }, // crosses the end
      { op: 'write', local: local.addr, remote: base + BigInt(SIZE) + (1n << 30n), length: 10 }, // nothing there
      { op: 'write', local: local.addr, remote: localOnly, length: 10 }, // registered, not remote-accessible
      { op: 'read', local: local.addr, remote: base - 1n, length: 2 }, // before the start
      { op: 'write', local: local.addr, remote: base + BigInt(SIZE) - 2n * BigInt(MiB), length: 2 * MiB + 1 }, // big body drained
      { op: 'write', local: local.addr, remote: 0xffff_ffff_ffff_fff0n, length: 100 }, // wraps 2^64
    ]),
    { timeoutMs: 5000 },
  );
  assert.equal(Array.from(r.statuses), [
    NATIVE_STATUS.ADDRESS_OUT_OF_RANGE,
    NATIVE_STATUS.MEMORY_NOT_REGISTERED,
    NATIVE_STATUS.MEMORY_NOT_REGISTERED,
    NATIVE_STATUS.MEMORY_NOT_REGISTERED,
    NATIVE_STATUS.ADDRESS_OUT_OF_RANGE,
    NATIVE_STATUS.ADDRESS_OUT_OF_RANGE,
  ]);
  assert.is(r.bytes, 0n);
  assert.is(await target.call('hash', { offset: 0, length: SIZE }), before, 'no byte of a refused write landed');
  // Local side: an unregistered local address never leaves the process.
  const l = await local.transport.submit(peer, batchOf([{ op: 'write', local: 12345n, remote: base, length: 10 }]), { timeoutMs: 5000 });
  assert.equal(Array.from(l.statuses), [NATIVE_STATUS.MEMORY_NOT_REGISTERED]);
  await local.transport.closePeer(peer);
  await healthy(target, local);
});

test('garbage, truncated, oversized and unauthenticated frames close only that connection', async () => {
  await target.call('zero');
  const zeros = (n: number) => hash(new Uint8Array(n));
  /** Every byte of the target's memory is still zero (none of the hostile frames wrote). */
  const untouched = async (what: string) =>
    assert.is(await target.call('hash', { offset: 0, length: SIZE }), zeros(SIZE), `${what}: the target's memory is unchanged`);
  const port = (target.info.endpoint as { port: number }).port;
  const epoch = BigInt(target.info.epoch);

  const garbage = await rawConnect(port);
  garbage.socket.write(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n' + 'z'.repeat(100)));
  assert.ok(await garbage.closed(2000), 'garbage closes the connection');
  await untouched('garbage');

  // A complete WRITE (header and its 16-byte body) to offset 0 before HELLO.
  const noHello = await rawConnect(port);
  noHello.socket.write(Buffer.concat([header(OP.WRITE, { addr: base, length: 16n }), Buffer.alloc(16, 0xee)]));
  assert.ok(await noHello.closed(2000), 'a WRITE before HELLO closes the connection');
  await untouched('WRITE before HELLO (offset 0)');

  const huge = await rawConnect(port);
  huge.socket.write(hello(epoch));
  const ack = (await huge.read(HEADER + HELLO_ACK_BODY))!;
  assert.is(ack[6], OP.HELLO | OP.RESPONSE);
  assert.is(ack.readInt32LE(8), 0);
  assert.is(ack.readBigUInt64LE(24), epoch);
  huge.socket.write(Buffer.concat([header(OP.WRITE, { addr: base, length: 1n << 62n }), Buffer.alloc(64, 0xee)]));
  assert.ok(await huge.closed(2000), 'a huge length closes the connection');
  await untouched('huge WRITE (offset 0)');

  const bad = await rawConnect(port);
  bad.socket.write(hello(epoch));
  await bad.read(HEADER + HELLO_ACK_BODY);
  // A well-formed WRITE to a bad range (its first 8 bytes are the last 8 of the region) is
  // answered precisely and its body is drained, not applied.
  bad.socket.write(Buffer.concat([header(OP.WRITE, { id: 7n, addr: base + BigInt(SIZE) - 8n, length: 64n }), Buffer.alloc(64, 0xab)]));
  const r1 = (await bad.read(HEADER))!;
  assert.is(r1[6], OP.WRITE | OP.RESPONSE);
  assert.is(r1.readBigUInt64LE(16), 7n);
  assert.is(r1.readInt32LE(8), NATIVE_STATUS.ADDRESS_OUT_OF_RANGE);
  bad.socket.write(header(OP.READ, { id: 8n, addr: base + 123456789n * 1000n, length: 8n }));
  const r2 = (await bad.read(HEADER))!;
  assert.is(r2.readInt32LE(8), NATIVE_STATUS.MEMORY_NOT_REGISTERED);
  bad.socket.write(header(99, { id: 9n }));
  assert.ok(await bad.closed(2000), 'an unknown op closes the connection');
  await untouched('out-of-range WRITE straddling the end');

  // A WRITE whose sender dies mid-body, aimed at its own region so that what may land is
  // told apart from the frames above.
  const at = 2 * MiB;
  const sent = 1000;
  const truncated = await rawConnect(port);
  truncated.socket.write(hello(epoch));
  await truncated.read(HEADER + HELLO_ACK_BODY);
  truncated.socket.write(Buffer.concat([header(OP.WRITE, { addr: base + BigInt(at), length: 1n << 20n }), Buffer.alloc(sent, 0xcd)]));
  truncated.socket.end();
  assert.ok(await truncated.closed(2000), 'the target closes a connection that ended mid-body');

  const version = await rawConnect(port);
  version.socket.write(Buffer.concat([header(OP.HELLO, { version: 99, length: 26n }), Buffer.alloc(26)]));
  const v = (await version.read(HEADER))!;
  assert.is(v.readInt32LE(8), NATIVE_STATUS.PROTOCOL_MISMATCH);
  assert.ok(await version.closed(2000), 'a HELLO of another version closes the connection');

  await new Promise((r) => setTimeout(r, 100));
  // Outside the truncated WRITE's first `sent` bytes nothing changed: offset 0 (the WRITE
  // before HELLO, the huge WRITE), the last 8 bytes (the straddling WRITE), everything else.
  assert.is(await target.call('hash', { offset: 0, length: at }), zeros(at), 'memory before the truncated WRITE is unchanged');
  assert.is(
    await target.call('hash', { offset: at + sent, length: SIZE - at - sent }),
    zeros(SIZE - at - sent),
    'memory after the bytes the truncated WRITE sent is unchanged',
  );
  // What the dead sender did send may have landed, in order: a prefix of 0xcd bytes, zeros after.
  const landed = await target.call<string>('hash', { offset: at, length: sent });
  const prefixes = new Set(Array.from({ length: sent + 1 }, (_, k) => hash(Buffer.concat([Buffer.alloc(k, 0xcd), Buffer.alloc(sent - k)]))));
  assert.ok(prefixes.has(landed), 'the truncated WRITE landed at most the bytes it sent, at its own address');
  await healthy(target, local);
});

test('shared-secret authentication: missing or wrong secret → AUTH_FAILED, nothing touched', async () => {
  const secured = await spawnTarget(MiB, { authSecret: 'correct horse' });
  const before = await secured.call('hash', { offset: 0, length: MiB });
  const none = await localTransport(MiB);
  const wrong = await localTransport(MiB, { authSecret: 'battery staple' });
  const right = await localTransport(MiB, { authSecret: 'correct horse' });
  try {
    await rejectsWith(none.transport.openPeer(secured.descriptor), 'AUTH_FAILED');
    await rejectsWith(wrong.transport.openPeer(secured.descriptor), 'AUTH_FAILED');
    // A client with a secret refuses a server without one (it could not prove itself).
    await rejectsWith(right.transport.openPeer(target.descriptor), 'AUTH_FAILED');
    // Raw: frames after HELLO without AUTH close the connection, memory untouched.
    const raw = await rawConnect((secured.info.endpoint as { port: number }).port);
    raw.socket.write(hello(BigInt(secured.info.epoch)));
    const ack = (await raw.read(HEADER + HELLO_ACK_BODY))!;
    assert.is(ack[HEADER + 16], 1, 'auth required flag');
    raw.socket.write(Buffer.concat([header(OP.WRITE, { addr: BigInt(secured.info.addr), length: 32n }), Buffer.alloc(32, 0x5a)]));
    assert.ok(await raw.closed(2000));
    assert.is(await secured.call('hash', { offset: 0, length: MiB }), before);
    await healthy(secured, right);
  } finally {
    await Promise.all([none.transport.close(), wrong.transport.close(), right.transport.close()]);
    await secured.kill();
  }
});

test('a peer killed mid-batch fails the batch fast with CONNECTION_LOST, never hangs', async () => {
  const victim = await spawnTarget(64 * MiB);
  const peer = await local.transport.openPeer(victim.descriptor);
  const reqs = [];
  for (let k = 0; k < 256; k++) reqs.push({ op: 'write' as const, local: local.addr, remote: BigInt(victim.info.addr), length: 16 * MiB });
  const t0 = Date.now();
  const settled = rejectsWith(local.transport.submit(peer, batchOf(reqs), { timeoutMs: 20000 }), ['CONNECTION_LOST', 'PEER_UNREACHABLE']);
  // Killed once the batch's bytes are on their way (4 GiB: it is far from done).
  await until('the batch started moving bytes to the victim', () => bytesQueuedTo(victim.child.pid!) > 0);
  await victim.kill('SIGKILL');
  const err = await settled;
  assert.ok(Date.now() - t0 < 5000, `failed within ${Date.now() - t0} ms`);
  assert.ok((err as unknown as { statuses: Int32Array }).statuses.length === 256);
  // Later submits to the dead peer fail fast too.
  await rejectsWith(
    local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: BigInt(victim.info.addr), length: 10 }]), { timeoutMs: 5000 }),
    ['PEER_UNREACHABLE', 'CONNECTION_LOST'],
  );
  await local.transport.closePeer(peer);
});

test('abort via AbortSignal and a per-batch deadline (stopped peer) reject with ABORTED / TIMEOUT', async () => {
  const peer = await local.transport.openPeer(target.descriptor);
  const reqs = [];
  for (let k = 0; k < 512; k++) reqs.push({ op: 'write' as const, local: local.addr, remote: base, length: 4 * MiB });
  const ac = new AbortController();
  const p = local.transport.submit(peer, batchOf(reqs), { timeoutMs: 20000, signal: ac.signal });
  setTimeout(() => ac.abort(), 20);
  const t0 = Date.now();
  const err = await rejectsWith(p, 'ABORTED');
  assert.ok(Date.now() - t0 < 2000);
  assert.ok((err as unknown as { statuses: Int32Array }).statuses.some((s) => s === NATIVE_STATUS.ABORTED));
  await rejectsWith(local.transport.submit(peer, batchOf(reqs.slice(0, 1)), { timeoutMs: 1000, signal: AbortSignal.abort() }), 'ABORTED');

  // Deadline: the target is stopped (SIGSTOP) so nothing is acknowledged. Every one of its
  // threads must be stopped before the batch goes out: kill() returns first, and a target
  // still running for a few milliseconds could finish the 32 MiB before the deadline.
  await stopProcess(target.child.pid!);
  try {
    const t1 = Date.now();
    await rejectsWith(local.transport.submit(peer, batchOf(reqs.slice(0, 8)), { timeoutMs: 300 }), 'TIMEOUT');
    const took = Date.now() - t1;
    assert.ok(took >= 290 && took < 1500, `timed out after ${took} ms`);
  } finally {
    target.child.kill('SIGCONT');
  }
  await local.transport.closePeer(peer);
  await healthy(target, local);
});

test('a peer restarted at the same address is detected (STALE_DESCRIPTOR), never written', async () => {
  const first = await spawnTarget(MiB);
  const port = (first.info.endpoint as { port: number }).port;
  const peer = await local.transport.openPeer(first.descriptor);
  const one = batchOf([{ op: 'write', local: local.addr, remote: BigInt(first.info.addr), length: 100 }]);
  await local.transport.submit(peer, one, { timeoutMs: 5000 });
  await first.kill('SIGKILL');
  let second: TargetProcess | undefined;
  for (let i = 0; i < 20 && !second; i++) {
    second = await spawnTarget(MiB, { port }).catch(() => undefined);
    if (!second) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(second, 'restarted on the same port');
  try {
    const before = await second!.call('hash', { offset: 0, length: MiB });
    // The old peer handle fails (first CONNECTION_LOST maybe, then STALE on reconnect).
    let code = '';
    for (let i = 0; i < 3 && code !== 'STALE_DESCRIPTOR'; i++) {
      code = await local.transport.submit(peer, one, { timeoutMs: 5000 }).then(
        () => 'OK',
        (e: { code: string }) => e.code,
      );
    }
    assert.is(code, 'STALE_DESCRIPTOR');
    await rejectsWith(local.transport.openPeer(first.descriptor), 'STALE_DESCRIPTOR');
    assert.is(await second!.call('hash', { offset: 0, length: MiB }), before, 'nothing written to the new process');
    await healthy(second!, local);
  } finally {
    await local.transport.closePeer(peer);
    await second?.kill();
  }
});

test('registration errors are typed', async () => {
  const l = local.transport;
  await rejectsWith(l.registerMemory({ buffer: local.buffer.subarray(10, 20), length: 10n, device: 'cpu', remoteAccess: true }), 'MEMORY_OVERLAP');
  // No GPU: NO_DEVICE; built without CUDA, or 0x1000 is not device memory: MEMORY_KIND_UNSUPPORTED (test/cuda.test.ts).
  await rejectsWith(l.registerMemory({ addr: 0x1000n, length: 4096n, device: 'cuda:0', remoteAccess: true }), ['NO_DEVICE', 'MEMORY_KIND_UNSUPPORTED']);
  await rejectsWith(l.registerMemory({ buffer: new Uint8Array(16), length: 32n, device: 'cpu', remoteAccess: true }), 'ADDRESS_OUT_OF_RANGE');
  await rejectsWith(l.unregisterMemory(0x1234n), 'MEMORY_NOT_REGISTERED');
  const sab = new SharedArrayBuffer(4096);
  const r = await l.registerMemory({ buffer: sab, length: 4096n, device: 'cpu', remoteAccess: true });
  await l.unregisterMemory(r.addr);
  await rejectsWith(l.unregisterMemory(r.addr), 'MEMORY_NOT_REGISTERED');
});

test.run();
