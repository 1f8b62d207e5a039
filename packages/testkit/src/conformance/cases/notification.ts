// The notification case: a batch's notification arrives after its data landed.
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { assertBytes, hostMemory, pattern } from '../expect.js';
import { checkPayload, type TargetMemory } from '../target.js';
import type { CaseRegistry } from './registry.js';

export function notificationCase({ it }: CaseRegistry): void {
  it('notification: arrives after the data of its batch', async ({ initiator, target, targetMemory }) => {
    const size = 64 * 1024;
    const local = await hostMemory(initiator, size, pattern(size, 42));
    const remote = await targetMemory.alloc(size);
    try {
      const before = (await targetMemory.notifications()).length;
      await initiator.transfer(target, batchOf([{ op: 'write', local: local.addr, remote, length: size }]), { notify: checkPayload(remote, size) });
      let got: Awaited<ReturnType<TargetMemory['notifications']>> = [];
      for (let i = 0; i < 200 && got.length <= before; i++) {
        got = await targetMemory.notifications();
        if (got.length <= before) await new Promise((r) => setTimeout(r, 10));
      }
      assert.ok(got.length > before, 'notification delivered');
      const n = got[got.length - 1]!;
      assert.is(n.from, initiator.segmentName);
      assert.ok(n.snapshot, 'target could snapshot the range');
      assertBytes(n.snapshot!, pattern(size, 42), 'data was in place when the notification arrived');
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });
}
