import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, isTransferError } from '@te/connector';
import { withEnginePair } from './fixtures/engine-pair.js';

/*
 * Unregistering local memory that this process's own batches are still moving, over real
 * transports: the engine refuses it (MEMORY_IN_USE) and every batch lands whole. Each
 * transport used to end such batches its own way: mooncake-tcp failed them
 * (CONNECTION_LOST), mooncake-rdma refused their requests (MEMORY_NOT_REGISTERED), and
 * mooncake-shm finished them from memory that was already unregistered.
 */
const BATCHES = 8;
const REQUESTS = 16;
const SIZE = 1 << 20;

for (const connector of ['mooncake-tcp', 'mooncake-shm', 'mooncake-rdma']) {
  test(`${connector}: unregistering a source under ${BATCHES} batches in flight is refused, and every byte lands`, async () => {
    await withEnginePair(connector, async (sender, target) => {
      const bytes = BATCHES * REQUESTS * SIZE;
      const source = new Uint8Array(bytes);
      for (let i = 0; i < bytes; i += 4096) source[i] = (i / 4096) % 251;
      const destination = new Uint8Array(bytes);
      const local = await sender.registerMemory(source);
      const remote = await target.registerMemory(destination);
      // Another region of the sender, which no batch uses: it may go at any time.
      const unused = await sender.registerMemory(new Uint8Array(4096));
      await sender.openSegment(target.segmentName);
      const batches = Array.from({ length: BATCHES }, (_, b) => {
        const requests = Array.from({ length: REQUESTS }, (_, r) => {
          const offset = BigInt((b * REQUESTS + r) * SIZE);
          return { op: 'write' as const, local: local.addr + offset, remote: remote.addr + offset, length: SIZE };
        });
        const moving = sender.transfer(target.segmentName, batchOf(requests), { timeoutMs: 60_000 });
        moving.catch(() => {});
        return moving;
      });
      // Submitted to a known peer without an asynchronous step, so all are in flight here.
      const refused = await sender.unregisterMemory(local).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(isTransferError(refused, 'MEMORY_IN_USE'), `unregister under batches in flight: ${String(refused)}`);
      assert.match((refused as Error).message, new RegExp(`local memory of ${BATCHES} batches in flight; await them`));
      assert.equal((refused as { details?: unknown }).details, { addr: local.addr, inFlight: BATCHES, overdue: 0 });
      await sender.unregisterMemory(unused);
      const results = await Promise.allSettled(batches);
      const failures = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
      assert.equal(failures, [], 'every batch completes');
      assert.ok(Buffer.from(destination).equals(Buffer.from(source)), 'every byte landed');
      // Settled: the region may go now.
      await sender.unregisterMemory(local);
    });
  });
}

test.run();
