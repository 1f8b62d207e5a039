import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { constants as bufferConstants } from 'node:buffer';
import { fileURLToPath } from 'node:url';
import { batchOf, createTransferEngine, isTransferError, type TransferEngine } from '@te/connector';
import { compileWorkerScript, spawnTargetProcess } from '@te/testkit';
import { createEndpoint, pattern, register } from './helpers.js';

/*
 * Pool memory: engine.allocateMemory hands out a sealed memfd that each target maps, so a
 * request on it is copied with memcpy instead of process_vm_*. Everything else about a
 * transfer stays: bytes land exactly, other memory still moves, and freeing the pool drops
 * the targets' mappings (a target killed mid-copy: peer-death.test.ts, for both kinds).
 */
const fixture = fileURLToPath(new URL('./fixtures/conformance-target.ts', import.meta.url));
const config = { connector: 'mooncake-shm', timeouts: { transferMs: 10_000, handshakeMs: 5_000 } };

test('writes and reads on pool memory land byte for byte in another process, at odd offsets', async () => {
  const target = await spawnTargetProcess(await compileWorkerScript(fixture), config);
  const initiator: TransferEngine = await createTransferEngine(config);
  try {
    const size = (3 << 20) + 77;
    const pool = await initiator.allocateMemory(size);
    assert.ok(pool.buffer && pool.buffer.byteLength === size);
    pool.buffer.set(pattern(21, size));
    const remote = await target.alloc(size + 64, { fill: 0 });
    // Odd offsets on both sides, sizes below, at and above the 256 KiB copy chunk.
    const pieces = [
      { at: 0, to: 8, length: 1 },
      { at: 3, to: 16, length: 4093 },
      { at: 5000, to: 5013, length: 262_144 },
      { at: 300_001, to: 300_000, length: size - 300_001 },
    ];
    await initiator.transfer(
      target.segment,
      batchOf(pieces.map((p) => ({ op: 'write' as const, local: pool.addr + BigInt(p.at), remote: remote + BigInt(p.to), length: p.length }))),
    );
    const landed = await target.read(remote, size + 64);
    for (const p of pieces) assert.equal(landed.subarray(p.to, p.to + p.length), pool.buffer.subarray(p.at, p.at + p.length), `piece at ${p.at}`);
    // Reads: the target's bytes into the pool, at an odd offset.
    await target.write(remote, pattern(22, 1 << 20));
    await initiator.read(target.segment, pool.addr + 9n, remote, 1 << 20);
    assert.equal(pool.buffer.subarray(9, 9 + (1 << 20)), pattern(22, 1 << 20));
    await initiator.freeMemory(pool);
  } finally {
    await initiator.close();
    await target.close();
  }
});

// Node 20 makes no ArrayBuffer past 4 GiB: creating the view of such a pool ran its
// finalizer twice ("free(): double free detected"), killing the process. A pool past the
// limit now has no view, and moves like any other.
test('a pool past the longest ArrayBuffer of this Node.js has no JS view, and its bytes move at high offsets', async () => {
  const target = await spawnTargetProcess(await compileWorkerScript(fixture), config);
  const initiator: TransferEngine = await createTransferEngine(config);
  try {
    const size = 8n << 30n; // memfd pages are allocated when touched: two are
    const pool = await initiator.allocateMemory(size);
    assert.is(pool.buffer === undefined, size > BigInt(bufferConstants.MAX_LENGTH), `a view exactly when Node.js takes one of ${size} bytes`);
    const at = pool.addr + (6n << 30n) + 3n;
    const remote = await target.alloc(8192, { fill: 0 });
    await target.write(remote, pattern(23, 4096));
    await initiator.read(target.segment, at, remote, 4096);
    await initiator.write(target.segment, at, remote + 4096n, 4096);
    assert.equal(await target.read(remote + 4096n, 4096), pattern(23, 4096), 'the bytes went into the pool 6 GiB in and back out');
    await initiator.freeMemory(pool);
  } finally {
    await initiator.close();
    await target.close();
  }
});

test('as a target: pool requests are copied through the mapping, other memory with process_vm_*', async () => {
  const a = await createEndpoint('pool-initiator');
  const b = await createEndpoint('pool-target');
  try {
    const dst = new Uint8Array(1 << 20);
    const remote = await register(b.transport, dst);
    const pool = await a.transport.allocateMemory!(1n << 20n, 'cpu');
    await a.transport.registerMemory({ addr: pool.addr, length: pool.length, device: 'cpu', remoteAccess: false, buffer: pool.buffer });
    pool.buffer!.set(pattern(23, 1 << 20));
    const plain = pattern(24, 4096);
    const plainAddr = await register(a.transport, plain, false);
    const peer = await a.transport.openPeer(b.descriptor());
    const copies = () => b.transport.describe!().copies as { poolChunks: number; processVmChunks: number; poolsMapped: number };
    const before = copies();
    const r = await a.transport.submit(
      peer,
      batchOf([
        { op: 'write', local: pool.addr + 1n, remote: remote + 2n, length: 100_000 },
        { op: 'write', local: plainAddr, remote: remote + 200_000n, length: 4096 },
      ]),
      { timeoutMs: 5_000 },
    );
    assert.equal([...r.statuses], [0, 0]);
    assert.equal(dst.subarray(2, 100_002), pool.buffer!.subarray(1, 100_001));
    assert.equal(dst.subarray(200_000, 204_096), plain);
    const after = copies();
    assert.is(after.poolChunks, before.poolChunks + 1);
    assert.is(after.processVmChunks, before.processVmChunks + 1);
    assert.is(after.poolsMapped, before.poolsMapped + 1);
    // Freeing needs it unregistered first; then the target lets go of its mapping.
    try {
      await a.transport.freeMemory!(pool.addr);
      assert.unreachable('a registered pool was freed');
    } catch (e) {
      assert.ok(isTransferError(e) && e.code === 'INVALID_ARGUMENT', String(e));
    }
    await a.transport.unregisterMemory(pool.addr);
    await a.transport.freeMemory!(pool.addr);
    for (let i = 0; i < 200 && copies().poolsMapped !== before.poolsMapped; i++) await new Promise((res) => setTimeout(res, 10));
    assert.is(copies().poolsMapped, before.poolsMapped);
    // The JS view outlives free (the mapping is held until it is collected): reading it is safe.
    assert.is(pool.buffer![5], pattern(23, 8)[5]);
  } finally {
    await a.transport.close();
    await b.transport.close();
  }
});

async function refusal(call: () => Promise<unknown>): Promise<string> {
  try {
    await call();
  } catch (e) {
    assert.ok(isTransferError(e), String(e));
    return e.code;
  }
  return 'accepted';
}

test('bad input to the allocator is refused with a typed error', async () => {
  const a = await createEndpoint('pool-bad-input');
  try {
    assert.is(await refusal(() => a.transport.allocateMemory!(4096n, 'cuda:0')), 'MEMORY_KIND_UNSUPPORTED');
    assert.is(await refusal(() => a.transport.allocateMemory!(1n << 60n, 'cpu')), 'INVALID_ARGUMENT');
    // More than the address space can map: the kernel refuses, the caller gets OUT_OF_MEMORY.
    assert.is(await refusal(() => a.transport.allocateMemory!(1n << 50n, 'cpu')), 'OUT_OF_MEMORY');
    // An address no allocation starts at, inside one or not.
    const pool = await a.transport.allocateMemory!(8192n, 'cpu');
    assert.is(await refusal(() => a.transport.freeMemory!(pool.addr + 8n)), 'INVALID_ARGUMENT');
    assert.is(await refusal(() => a.transport.freeMemory!(0x1000n)), 'INVALID_ARGUMENT');
    await a.transport.freeMemory!(pool.addr);
    assert.is(await refusal(() => a.transport.freeMemory!(pool.addr)), 'INVALID_ARGUMENT'); // twice
  } finally {
    await a.transport.close();
  }
  // The engine refuses an empty allocation before any transport sees it.
  const engine = await createTransferEngine(config);
  try {
    assert.is(await refusal(() => engine.allocateMemory(0)), 'INVALID_ARGUMENT');
  } finally {
    await engine.close();
  }
});

test.run();
