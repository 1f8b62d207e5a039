// Settle means settled: after a batch's promise settled no byte of it lands, and a
// cancelled batch whose slices are stuck fails alone, not the batches sharing its lane.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { stopProcess, tcpSocketsOf, until } from '@te/testkit';
import { hash, KiB, localTransport, MiB, pattern, rejectsWith, spawnTarget } from './helpers.js';

test('a timed-out WRITE queued at a stopped target never lands after settle; a sibling batch on the same lane completes', async () => {
  const target = await spawnTarget(4 * MiB);
  // One lane: both batches share one connection. Short grace: the stuck lane is dropped soon.
  const local = await localTransport(4 * MiB, { lanesPerPeer: 1, cancelGraceMs: 200 });
  try {
    const base = BigInt(target.info.addr);
    const peer = await local.transport.openPeer(target.descriptor);
    const stuck = pattern(11, MiB);
    const sibling = pattern(12, 64 * KiB);
    local.buffer.set(stuck, 0);
    local.buffer.set(sibling, 2 * MiB);
    await target.call('zero');
    const untouched = await target.call('hash', { offset: 0, length: MiB });
    await stopProcess(target.child.pid!);
    let siblingDone: Promise<{ statuses: Int32Array }>;
    try {
      // Both frames fit in the loopback socket buffers: they sit at the stopped target.
      const a = local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: base, length: MiB }]), { timeoutMs: 300 });
      siblingDone = local.transport.submit(
        peer,
        batchOf([{ op: 'write', local: local.addr + BigInt(2 * MiB), remote: base + BigInt(2 * MiB), length: sibling.length }]),
        { timeoutMs: 20000 },
      );
      siblingDone.catch(() => {});
      await rejectsWith(a, 'TIMEOUT');
    } finally {
      target.child.kill('SIGCONT');
    }
    // The sibling was only sharing the lane: it is sent again and lands.
    const r = await siblingDone.catch((e: Error & { code: string }) => e);
    assert.ok(!(r instanceof Error), `the sibling batch failed: ${(r as Error & { code?: string }).code} ${(r as Error).message}`);
    assert.equal(Array.from((r as { statuses: Int32Array }).statuses), [0], 'the sibling batch completed');
    assert.is(await target.call('hash', { offset: 2 * MiB, length: sibling.length }), hash(sibling));
    // The settled batch's bytes were queued at the target when it resumed, on the connection
    // the initiator closed to settle it: once the target has dropped every connection its
    // initiator closed, it has read or discarded all of them, and none may have landed.
    const port = (target.info.endpoint as { port: number }).port;
    const closing = () => tcpSocketsOf(target.child.pid!).filter((s) => s.localPort === port && s.state !== 'ESTABLISHED');
    await until(
      () => `the target dropped the connection the initiator closed (${JSON.stringify(closing())})`,
      () => closing().length === 0,
    );
    assert.is(await target.call('hash', { offset: 0, length: MiB }), untouched, 'nothing of the timed-out WRITE landed after it settled');
  } finally {
    await local.transport.close();
    await target.call('exit').catch(() => {});
  }
});

test.run();
