import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS, tryToDetach } from '@te/testkit';
import { withEnginePair } from './fixtures/engine-pair.js';

/*
 * A JS buffer registered as a peer's destination, which the application then tries to
 * detach every way Node.js offers, over real transports. Before the engine made registered
 * buffers untransferable, a transfer list (any Node.js line) or transfer() (22 and later)
 * moved the memory to a new ArrayBuffer; once that was collected the peer's next write went
 * to freed memory, and with a 64 MiB destination (unmapped when freed) the target died of
 * SIGSEGV. Now the buffer stays attached and the write lands in it.
 */
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;
const SIZE = 8 << 20;

for (const connector of ['mooncake-tcp', 'mooncake-shm', 'mooncake-rdma']) {
  test(`${connector}: a registered destination cannot be detached, and a peer's write lands in it`, async () => {
    await withEnginePair(connector, async (sender, target) => {
      const source = new Uint8Array(SIZE);
      for (let i = 0; i < SIZE; i += 512) source[i] = ((i / 512) % 253) + 1;
      const destination = new Uint8Array(SIZE);
      const local = await sender.registerMemory(source);
      const remote = await target.registerMemory(destination);

      tryToDetach(destination.buffer, { transferLists: TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS });
      assert.is(destination.byteLength, SIZE, 'the registered destination is still attached');
      for (let i = 0; i < 3; i++) {
        collectGarbage();
        await new Promise((resolve) => setTimeout(resolve, 10));
      }

      await sender.openSegment(target.segmentName);
      await sender.transfer(target.segmentName, batchOf([{ op: 'write', local: local.addr, remote: remote.addr, length: SIZE }]), {
        timeoutMs: 30_000,
      });
      assert.ok(Buffer.from(destination.buffer, 0, SIZE).equals(Buffer.from(source.buffer, 0, SIZE)), 'every byte landed in the registered buffer');
      await target.unregisterMemory(remote);
      assert.is(destination.byteLength, SIZE, 'still attached after unregisterMemory (the mark stays)');
    });
  });
}

test.run();
