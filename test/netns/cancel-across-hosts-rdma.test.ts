import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Cluster, tbfSupport, testIf } from './harness/index.js';
import { CLOSE_WRITE_BYTES, writeThenClose } from './write-then-close.js';

/*
 * A cancelled mooncake-rdma WRITE across hosts, on both socket providers: once submit has
 * rejected, no byte of it may land in the target's memory. Posted RMA cannot be recalled,
 * so the batch must settle only once the provider reported every posted operation, and a
 * reported write on these providers has reached the target. The link toward the target
 * is slow (8 Mbit/s, up to 1 s of queue): most of the WRITE is still on its way at the
 * deadline. (The same case for mooncake-tcp, which resets and revokes, is
 * cancel-across-hosts.test.ts.)
 */
const fixture = fileURLToPath(new URL('./fixtures/rdma-endpoint.ts', import.meta.url));
const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// One 2 MiB request on both providers; and 512 requests of 4 KiB in one batch on
// tcp;ofi_rxm, which orders writes: there only each batch's last write asks for delivery
// (its fence) and the others are held for it, and the fence, queued behind the window, is
// never posted.
const CASES = [
  { provider: 'tcp;ofi_rxm', requests: 1 },
  { provider: 'tcp;ofi_rxm', requests: 512 },
  { provider: 'sockets', requests: 1 },
];
for (const { provider, requests } of CASES) {
  const what = requests === 1 ? 'a timed-out WRITE' : `a timed-out batch of ${requests} WRITEs`;
  testIf(test, tbfSupport(), `${provider}: ${what} over a slow link: after submit rejected, no byte of it lands at the target`, async () => {
    await Cluster.with(['initiator', 'target'], async (c) => {
      c.rateLimit('target', { mbit: 8, queueMs: 1000 });
      const env = (host: string, options: Record<string, unknown> = {}) => ({
        FI_PROVIDER: provider,
        TE_NETNS_RDMA: JSON.stringify({ address: c.host(host).address, size: 2 * MiB, options }),
      });
      const target = await c.spawn('target', fixture, { env: env('target') });
      const initiator = await c.spawn('initiator', fixture, { env: env('initiator') });
      await target.call('fill', { value: 0 });
      await initiator.call('fill', { value: 0xa5 }); // no zero byte: what landed is what is not zero
      const r = await initiator.call<{ code: string; message?: string }>('write', { peer: target.info, length: 2 * MiB, timeoutMs: 300, requests }, 60_000);
      assert.is(r.code, 'TIMEOUT', `2 MiB cannot land in 300 ms at 8 Mbit/s: ${r.message ?? ''}`);
      const atSettle = await target.call<number>('landed');
      // Longer than the link's queue: whatever was still on its way has arrived by now.
      await sleep(2000);
      const later = await target.call<number>('landed');
      assert.is(later, atSettle, `${later - atSettle} bytes of the WRITE landed after submit rejected (${atSettle} had landed before)`);
    });
  });
}

testIf(test, tbfSupport(), 'tcp;ofi_rxm: closing the transport with a WRITE on its way settles it ABORTED and says it may still land at the peer', async () => {
  await Cluster.with(['initiator', 'target'], async (c) => {
    const { r, atSettle, later } = await writeThenClose(c, fixture, (host) => ({
      FI_PROVIDER: 'tcp;ofi_rxm',
      TE_NETNS_RDMA: JSON.stringify({ address: c.host(host).address, size: CLOSE_WRITE_BYTES }),
    }));
    assert.is(r.code, 'ABORTED', r.message ?? '');
    assert.ok(atSettle < CLOSE_WRITE_BYTES, 'the whole WRITE had landed before the close: the case did not happen');
    assert.is(
      r.remoteMayBeWritten,
      true,
      `a write abandoned on its way settled without remoteMayBeWritten (${later - atSettle} bytes landed after it settled)`,
    );
  });
});

test.run();
