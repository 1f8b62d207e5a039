import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { NATIVE_STATUS, batchOf, type TransportPeer } from '@te/connector';
import { createEndpoint, pattern, register, type Endpoint } from './helpers.js';

/*
 * The target checks every request against its own registry before any byte moves, and the
 * initiator checks its local ranges against its own: a bad range fails that request alone
 * and changes nothing. The transports are driven directly, so no engine check runs first.
 */
let initiator: Endpoint;
let target: Endpoint;
let peer: TransportPeer;
const SIZE = 1 << 20;
const src = pattern(1, 2 * SIZE);
let srcAddr: bigint;
// Two target regions that touch: [region A][region B] inside one buffer.
const both = new Uint8Array(2 * SIZE);
let a: bigint;
let b: bigint;
const localOnly = new Uint8Array(SIZE);
let localOnlyAddr: bigint;

test.before(async () => {
  initiator = await createEndpoint('bounds-initiator');
  target = await createEndpoint('bounds-target');
  srcAddr = await register(initiator.transport, src);
  a = await register(target.transport, both.subarray(0, SIZE));
  b = await register(target.transport, both.subarray(SIZE));
  localOnlyAddr = await register(target.transport, localOnly, false);
  peer = await initiator.transport.openPeer(target.descriptor());
});

test.after(async () => {
  await initiator.transport.close();
  await target.transport.close();
});

const submit = (ops: { op: 'read' | 'write'; local: bigint; remote: bigint; length: number }[]) =>
  initiator.transport.submit(peer, batchOf(ops), { timeoutMs: 5_000 });

test('the two regions are adjacent, and a write inside one lands byte for byte', async () => {
  assert.is(b, a + BigInt(SIZE));
  const r = await submit([{ op: 'write', local: srcAddr, remote: a, length: SIZE }]);
  assert.equal([...r.statuses], [NATIVE_STATUS.OK]);
  assert.equal(both.subarray(0, SIZE), src.subarray(0, SIZE));
  both.fill(0);
});

test('a write past the end of the last region is ADDRESS_OUT_OF_RANGE and changes nothing', async () => {
  const r = await submit([{ op: 'write', local: srcAddr, remote: b + BigInt(SIZE) - 100n, length: 4096 }]);
  assert.equal([...r.statuses], [NATIVE_STATUS.ADDRESS_OUT_OF_RANGE]);
  assert.ok(both.every((x) => x === 0));
});

test('a write straddling two registered regions is ADDRESS_OUT_OF_RANGE and changes neither', async () => {
  const r = await submit([{ op: 'write', local: srcAddr, remote: b - 10n, length: 20 }]);
  assert.equal([...r.statuses], [NATIVE_STATUS.ADDRESS_OUT_OF_RANGE]);
  assert.ok(both.every((x) => x === 0));
});

test('a read straddling two registered regions is refused and the local buffer stays as it was', async () => {
  const dst = new Uint8Array(64).fill(7);
  const dstAddr = await register(initiator.transport, dst);
  const r = await submit([{ op: 'read', local: dstAddr, remote: b - 32n, length: 64 }]);
  assert.equal([...r.statuses], [NATIVE_STATUS.ADDRESS_OUT_OF_RANGE]);
  assert.ok(dst.every((x) => x === 7));
  await initiator.transport.unregisterMemory(dstAddr);
});

test('unregistered and local-only target memory is MEMORY_NOT_REGISTERED', async () => {
  const r = await submit([
    { op: 'write', local: srcAddr, remote: 0x10n, length: 16 },
    { op: 'write', local: srcAddr, remote: localOnlyAddr, length: 16 },
    { op: 'read', local: srcAddr, remote: localOnlyAddr, length: 16 },
  ]);
  assert.equal([...r.statuses], [NATIVE_STATUS.MEMORY_NOT_REGISTERED, NATIVE_STATUS.MEMORY_NOT_REGISTERED, NATIVE_STATUS.MEMORY_NOT_REGISTERED]);
  assert.ok(localOnly.every((x) => x === 0));
});

test('an unregistered or straddling local range fails before anything is sent; the good requests of the batch land', async () => {
  const left = new Uint8Array(4096);
  const leftAddr = await register(initiator.transport, left);
  const r = await submit([
    { op: 'write', local: 0x20n, remote: a, length: 16 },
    { op: 'write', local: leftAddr + 4000n, remote: a, length: 200 },
    { op: 'write', local: srcAddr, remote: a + 4096n, length: 4096 },
  ]);
  assert.equal([...r.statuses], [NATIVE_STATUS.MEMORY_NOT_REGISTERED, NATIVE_STATUS.ADDRESS_OUT_OF_RANGE, NATIVE_STATUS.OK]);
  assert.ok(both.subarray(0, 4096).every((x) => x === 0));
  assert.equal(both.subarray(4096, 8192), src.subarray(0, 4096));
  assert.is(r.bytes, 4096n);
  await initiator.transport.unregisterMemory(leftAddr);
});

test('after unregistering a target region, requests into it are MEMORY_NOT_REGISTERED', async () => {
  const extra = new Uint8Array(8192);
  const addr = await register(target.transport, extra);
  await target.transport.unregisterMemory(addr);
  const r = await submit([{ op: 'write', local: srcAddr, remote: addr, length: 8192 }]);
  assert.equal([...r.statuses], [NATIVE_STATUS.MEMORY_NOT_REGISTERED]);
  assert.ok(extra.every((x) => x === 0));
});

test.run();
