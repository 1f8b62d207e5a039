import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Cluster, tbfSupport, testIf } from './harness/index.js';
import { CLOSE_WRITE_BYTES, writeThenClose } from './write-then-close.js';

/*
 * A cancelled mooncake-tcp WRITE across hosts: once submit has rejected, no byte of it may
 * land in the target's memory. The link toward the target is slow (8 Mbit/s, up to 1 s of
 * queue), so when the connection is reset part of the WRITE is still on its way: sent
 * by the initiator, not yet received by the target. The reset does not stop those bytes
 * (it travels behind them); the batch may only settle once the target has confirmed that
 * nothing more from that connection will be applied. The grace time (how long in-flight
 * slices are awaited, then how long the target has to confirm) is longer than the queue.
 */
const fixture = fileURLToPath(new URL('./fixtures/tcp-endpoint.ts', import.meta.url));
const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

testIf(test, tbfSupport(), 'a timed-out WRITE over a slow link: after submit rejected, no byte of it lands at the target', async () => {
  await Cluster.with(['initiator', 'target'], async (c) => {
    c.rateLimit('target', { mbit: 8, queueMs: 1000 });
    const env = (host: string, options: Record<string, unknown> = {}) => ({
      TE_NETNS_TCP: JSON.stringify({ address: c.host(host).address, size: 8 * MiB, options }),
    });
    const target = await c.spawn('target', fixture, { env: env('target') });
    // One lane: the WRITE is on one connection.
    const initiator = await c.spawn('initiator', fixture, { env: env('initiator', { lanesPerPeer: 1, cancelGraceMs: 2000 }) });
    await target.call('fill', { value: 0 });
    await initiator.call('fill', { value: 0xa5 }); // no zero byte: what landed is a non-zero prefix
    const r = await initiator.call<{ code: string; message?: string; ms: number }>('write', { peer: target.info, length: 8 * MiB, timeoutMs: 300 }, 30_000);
    assert.is(r.code, 'TIMEOUT', `the WRITE cannot finish in 300 ms (+ 2 s of grace) at 8 Mbit/s: ${r.message ?? ''}`);
    const atSettle = await target.call<number>('landed');
    // Longer than the link's queue: whatever was still on its way has arrived by now.
    await sleep(2000);
    const later = await target.call<number>('landed');
    assert.ok(atSettle < 8 * MiB, 'the WRITE had not fully landed when it timed out');
    assert.is(later, atSettle, `${later - atSettle} bytes of the WRITE landed after submit rejected (${atSettle} had landed before)`);
  });
});

testIf(test, tbfSupport(), 'closing the transport with a WRITE on its way settles it ABORTED and says it may still land at the target', async () => {
  // No REVOKE is possible once the transport is gone: the reset travels behind the bytes
  // already on the slow link, and the target applies what it reads before the reset.
  await Cluster.with(['initiator', 'target'], async (c) => {
    const options = (host: string) => (host === 'initiator' ? { lanesPerPeer: 1 } : {});
    const { r, atSettle, later } = await writeThenClose(c, fixture, (host) => ({
      TE_NETNS_TCP: JSON.stringify({ address: c.host(host).address, size: CLOSE_WRITE_BYTES, options: options(host) }),
    }));
    assert.is(r.code, 'ABORTED', r.message ?? '');
    assert.ok(atSettle < CLOSE_WRITE_BYTES, 'the whole WRITE had landed before the close: the case did not happen');
    assert.is(
      r.remoteMayBeWritten,
      true,
      `a WRITE abandoned on its way settled without remoteMayBeWritten (${later - atSettle} bytes landed after it settled)`,
    );
  });
});

test.run();
