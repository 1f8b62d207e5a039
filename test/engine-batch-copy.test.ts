import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { OP_WRITE, allocateBatch } from '@te/connector';
import { withEnginePair } from './fixtures/engine-pair.js';

/*
 * A caller that rewrites its batch's arrays as soon as `transfer` returned, over real
 * transports. A batch to a known peer is taken by its transport before `transfer` returns;
 * the first batch to a peer waits for the peer's descriptor, and the engine used to route
 * and submit it from the caller's arrays after that wait: it moved what the arrays said by
 * then (here: to another place, half the bytes). The engine now copies a batch it holds past
 * the call, so every batch moves what the call said.
 */
const REQUESTS = 32;
const SIZE = 65536;

for (const connector of ['mooncake-tcp', 'mooncake-shm', 'mooncake-rdma']) {
  test(`${connector}: the first batch to a peer moves what the call said, though the caller rewrote its arrays after the call`, async () => {
    await withEnginePair(connector, async (sender, target) => {
      const source = new Uint8Array(REQUESTS * SIZE);
      const destination = new Uint8Array(2 * REQUESTS * SIZE);
      const local = await sender.registerMemory(source);
      const remote = await target.registerMemory(destination);
      for (const round of [1, 2, 3]) {
        // Round 1 is the first contact; before rounds 2 and 3 the peer is forgotten, so each is a first batch again.
        if (round > 1) await sender.forgetSegment(target.segmentName);
        source.fill(round);
        destination.fill(0);
        const batch = allocateBatch(REQUESTS);
        for (let i = 0; i < REQUESTS; i++) {
          batch.opcodes[i] = OP_WRITE;
          batch.localAddrs[i] = local.addr + BigInt(i * SIZE);
          batch.remoteAddrs[i] = remote.addr + BigInt(i * SIZE);
          batch.lengths[i] = BigInt(SIZE);
        }
        const moving = sender.transfer(target.segmentName, batch, { timeoutMs: 30_000 });
        moving.catch(() => {});
        // Reused at once for another batch: the second half of the destination, half the bytes.
        for (let i = 0; i < REQUESTS; i++) {
          batch.remoteAddrs[i] = remote.addr + BigInt((REQUESTS + i) * SIZE);
          batch.lengths[i] = BigInt(SIZE / 2);
        }
        await moving;
        const meant = destination.subarray(0, REQUESTS * SIZE);
        const elsewhere = destination.subarray(REQUESTS * SIZE);
        assert.ok(
          meant.every((x) => x === round),
          `round ${round}: every byte the call named landed`,
        );
        assert.ok(
          elsewhere.every((x) => x === 0),
          `round ${round}: nothing landed where the rewritten arrays point`,
        );
      }
    });
  });
}

test.run();
