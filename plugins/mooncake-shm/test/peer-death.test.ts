import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { batchOf, createTransferEngine, isTransferError, type TransferEngine } from '@te/connector';
import { compileWorkerScript, spawnTargetProcess, type TargetProcess } from '@te/testkit';
import { pattern } from './helpers.js';

/*
 * A target killed with requests in flight: the initiator's batch fails with a typed
 * connection error (end of stream on the socket means the target's copy threads are gone),
 * its memory can be unregistered at once (the batch settled), and a restarted target is
 * reached again.
 */
const fixture = fileURLToPath(new URL('./fixtures/conformance-target.ts', import.meta.url));
const config = { connector: 'mooncake-shm', timeouts: { transferMs: 10_000, handshakeMs: 5_000 } };
const SIZE = 32 << 20;

/** `p` rejects with a connection error (within `withinMs` when given); `ifSettled` is the failure when it resolves. */
async function expectConnectionError(p: Promise<unknown>, withinMs = Infinity, ifSettled = 'the batch to a killed target succeeded'): Promise<void> {
  const started = Date.now();
  try {
    await p;
    assert.unreachable(ifSettled);
  } catch (e) {
    if (!isTransferError(e)) throw e;
    assert.ok(['CONNECTION_LOST', 'PEER_FAILED'].includes(e.code), `${e.code}: ${e.message}`);
  }
  assert.ok(Date.now() - started < withinMs, `took ${Date.now() - started} ms`);
}

test('a target killed while it holds the batch (stopped, then SIGKILL): CONNECTION_LOST, settled', async () => {
  const target: TargetProcess = await spawnTargetProcess(await compileWorkerScript(fixture), config);
  const initiator: TransferEngine = await createTransferEngine(config);
  try {
    const local = await initiator.registerMemory(pattern(3, SIZE));
    const remote = await target.alloc(SIZE);
    await initiator.write(target.segment, local.addr, remote, 4096); // connected and working
    await target.stall();
    const p = initiator.write(target.segment, local.addr, remote, SIZE);
    await new Promise((r) => setTimeout(r, 50));
    target.kill();
    await expectConnectionError(p, 3_000);
    await initiator.unregisterMemory(local); // refused with MEMORY_IN_USE if the batch had not settled
  } finally {
    await initiator.close();
    await target.close();
  }
});

// Registered memory is copied with process_vm_*, allocated memory (shm's pool memory)
// through the target's mapping of it: the kill must end both the same way.
for (const memory of ['registered', 'allocated'] as const) {
  test(`a target killed in the middle of copying a large batch from ${memory} memory: a typed error, and the memory is free to release`, async () => {
    const target = await spawnTargetProcess(await compileWorkerScript(fixture), config);
    const initiator = await createTransferEngine(config);
    try {
      const local = memory === 'registered' ? await initiator.registerMemory(pattern(4, SIZE)) : await initiator.allocateMemory(SIZE);
      const remote = await target.alloc(SIZE);
      await initiator.write(target.segment, local.addr, remote, 4096);
      // Many passes over the region keep the target's copy threads busy when the signal lands.
      const ops = Array.from({ length: 64 }, () => ({ op: 'write' as const, local: local.addr, remote, length: SIZE }));
      const p = initiator.transfer(target.segment, batchOf(ops));
      await new Promise((r) => setTimeout(r, 20));
      target.kill();
      // Settled whole means the kill came after the last copy (the machine was too fast): rerun.
      await expectConnectionError(p, Infinity, 'the target died after all 2 GiB were copied; rerun (the machine was too fast)');
      // Refused with MEMORY_IN_USE if the batch had not settled.
      if (memory === 'registered') await initiator.unregisterMemory(local);
      else await initiator.freeMemory(local);
    } finally {
      await initiator.close();
      await target.close();
    }
  });
}

test('a restarted target is reached through a fresh descriptor', async () => {
  const first = await spawnTargetProcess(await compileWorkerScript(fixture), config);
  const initiator = await createTransferEngine(config);
  try {
    const local = await initiator.registerMemory(pattern(5, 8192));
    const r1 = await first.alloc(8192);
    await initiator.write(first.segment, local.addr, r1, 8192);
    first.kill();
    await first.close();
    const second = await spawnTargetProcess(await compileWorkerScript(fixture), config);
    try {
      const r2 = await second.alloc(8192);
      await initiator.write(second.segment, local.addr, r2, 8192);
      assert.equal(await second.read(r2, 8192), pattern(5, 8192));
    } finally {
      await second.close();
    }
  } finally {
    await initiator.close();
  }
});

test.run();
