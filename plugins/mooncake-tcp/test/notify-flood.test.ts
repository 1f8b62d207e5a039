// A notification flood cannot exhaust the receiver: notifications not yet handed to
// listeners are bounded per sending peer and in bytes; beyond that the sender's batch
// fails with POOL_EXHAUSTED (never acknowledged and then dropped).
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { localTransport, MiB, rejectsWith, spawnTarget } from './helpers.js';

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

test('a flood of notifications at a busy receiver is refused with POOL_EXHAUSTED beyond the per-peer bound; RSS stays bounded', async () => {
  const PER_PEER = 64;
  const target = await spawnTarget(MiB, { notifyQueuePerPeer: PER_PEER });
  const local = await localTransport(MiB);
  try {
    const peer = await local.transport.openPeer(target.descriptor);
    const pid = target.child.pid!;
    const rssBefore = rssMiB(pid);
    // The receiver's JS thread is busy until the flood is answered: nothing leaves its queue meanwhile.
    const { started, release, done: blocked } = target.block();
    await started;
    const payload = new Uint8Array(64000).fill(0x78);
    const flood = 1500; // 96 MB of notifications
    const results = await Promise.allSettled(
      Array.from({ length: flood }, () => local.transport.submit(peer, batchOf([]), { timeoutMs: 30000, notify: payload })),
    );
    const rssDuring = rssMiB(pid);
    release();
    if (process.env.TE_TEST_VERBOSE) console.log(`rss ${rssBefore.toFixed(1)} -> ${rssDuring.toFixed(1)} MiB`);
    const ok = results.filter((r) => r.status === 'fulfilled').length;
    const codes = new Set(results.flatMap((r) => (r.status === 'rejected' ? [(r.reason as { code: string }).code] : [])));
    assert.ok(ok <= PER_PEER, `${ok} notifications acknowledged while the receiver was busy (bound ${PER_PEER})`);
    assert.equal([...codes], ['POOL_EXHAUSTED'], 'every refused notification fails its batch with POOL_EXHAUSTED');
    assert.ok(rssDuring - rssBefore < 40, `receiver RSS grew ${(rssDuring - rssBefore).toFixed(1)} MiB during a 96 MB flood`);
    await blocked;
    // Every acknowledged notification reaches the listeners, and the queue has room again.
    const deadline = Date.now() + 10000;
    while ((await target.call<number>('notificationCount')) < ok && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.is(await target.call<number>('notificationCount'), ok);
    await local.transport.submit(peer, batchOf([]), { timeoutMs: 5000, notify: payload });
    // One notification is bounded too (64 KiB): larger ones are refused before they leave.
    await rejectsWith(local.transport.submit(peer, batchOf([]), { timeoutMs: 5000, notify: new Uint8Array(64 * 1024 + 1) }), 'INVALID_ARGUMENT');
  } finally {
    await local.transport.close();
    await target.call('exit').catch(() => {});
  }
});

test.run();
