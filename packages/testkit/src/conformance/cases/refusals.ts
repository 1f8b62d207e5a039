// Conformance cases a transport must refuse, changing nothing: out-of-range, unregistered
// and local-only memory on either side, an aborted signal, malformed batches.
import * as assert from 'uvu/assert';
import { allocateBatch } from '@te/connector';
import { assertBytes, hostMemory, pattern, rejectsWith } from '../expect.js';
import type { CaseRegistry } from './registry.js';

export function refusalCases({ it }: CaseRegistry): void {
  it('bounds: a write past the end of the peer region is refused and changes nothing', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 8192, pattern(8192, 3));
    const remote = await targetMemory.alloc(4096, { fill: 0x11 });
    try {
      const err = await rejectsWith(initiator.write(target, local.addr, remote + 2048n, 4096), ['ADDRESS_OUT_OF_RANGE']);
      // A refused batch rejects with the per-request statuses (TransferError.statuses): present,
      // one per request, and the refused request's is non-zero.
      const { statuses } = err as { statuses?: unknown };
      assert.ok(statuses instanceof Int32Array, `the error carries per-request statuses (got ${String(statuses)})`);
      assert.is(statuses.length, 1, 'one status per request');
      assert.is.not(statuses[0], 0, 'the refused request has a non-zero status');
      assertBytes(await targetMemory.read(remote, 4096), new Uint8Array(4096).fill(0x11), 'target memory unchanged');
      await initiator.write(target, local.addr, remote, 4096);
      assertBytes(await targetMemory.read(remote, 4096), pattern(8192, 3).subarray(0, 4096), 'peer still serves after the refusal');
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('bounds: unregistered or local-only peer memory is refused', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 4096);
    const gone = await targetMemory.alloc(4096);
    await targetMemory.free(gone);
    const privateRegion = await targetMemory.alloc(4096, { remoteAccess: false, fill: 0x22 });
    try {
      await rejectsWith(initiator.write(target, local.addr, gone, 4096), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
      await rejectsWith(initiator.write(target, local.addr, privateRegion, 4096), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
      assertBytes(await targetMemory.read(privateRegion, 4096), new Uint8Array(4096).fill(0x22));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(privateRegion);
    }
  });

  it('bounds: unregistered local memory is refused', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 4096);
    const remote = await targetMemory.alloc(4096, { fill: 0x33 });
    try {
      await rejectsWith(initiator.write(target, local.addr + 4096n * 64n, remote, 16), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
      await rejectsWith(initiator.write(target, local.addr + 4000n, remote, 200), ['ADDRESS_OUT_OF_RANGE', 'MEMORY_NOT_REGISTERED']);
      assertBytes(await targetMemory.read(remote, 4096), new Uint8Array(4096).fill(0x33));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('abort: an aborted signal refuses the batch', async ({ initiator, target, targetMemory }) => {
    const local = await hostMemory(initiator, 4096);
    const remote = await targetMemory.alloc(4096, { fill: 0x44 });
    try {
      const ac = new AbortController();
      ac.abort();
      await rejectsWith(initiator.write(target, local.addr, remote, 4096, { signal: ac.signal }), ['ABORTED']);
      assertBytes(await targetMemory.read(remote, 4096), new Uint8Array(4096).fill(0x44));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });
}

/** Registered last: it needs no memory and leaves none behind. */
export function malformedBatchCase({ it }: CaseRegistry): void {
  it('batch: malformed batches are refused before any transport sees them', async ({ initiator, target }) => {
    const bad = allocateBatch(2);
    await rejectsWith(initiator.transfer(target, { ...bad, lengths: new BigUint64Array(1) }), ['INVALID_ARGUMENT']);
    bad.opcodes[0] = 9;
    await rejectsWith(initiator.transfer(target, bad), ['INVALID_ARGUMENT']);
    await rejectsWith(initiator.transfer(target, allocateBatch(0), { timeoutMs: -1 }), ['INVALID_ARGUMENT']);
  });
}
