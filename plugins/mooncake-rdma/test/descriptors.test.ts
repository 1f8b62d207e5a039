// Out of file descriptors: a peer connecting to a rail's listener waits in the backlog, and
// the provider retries the accept at every progress pass. The rail must not spin on it, must
// log the episode once, and must serve peers again once descriptors are free.
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, type SegmentDescriptor } from '@te/connector';
import { compileWorkerScript, cpuUsedOver, forkCommandChild } from '@te/testkit';
import { bareSide } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function descriptorCase(provider: string): Promise<void> {
  const script = await compileWorkerScript(fileURLToPath(new URL('./fixtures/descriptor-target.ts', import.meta.url)));
  const target = forkCommandChild<SegmentDescriptor>(script, [provider], { nofile: 256, serialization: 'advanced' });
  const call = target.call;
  const local = new Uint8Array(4096).fill(0x5c);
  const me = await bareSide(provider, [local]);
  try {
    const descriptor = await target.ready;
    assert.ok((await call<number>('exhaust')) > 0);
    // This side connects; the target cannot accept the connection while it is out of
    // descriptors (the open fails on its connect timeout, 2 s).
    const opened = me.transport.openPeer(descriptor).then(
      () => 'opened',
      (e: Error) => e.message,
    );
    await sleep(300);
    const { used, wall } = await cpuUsedOver(target.child.pid!, 1000);
    assert.ok(used < 0.3 * wall, `target used ${used.toFixed(2)} s of CPU in ${wall.toFixed(2)} s while out of descriptors`);
    const warnings = await call<string[]>('warnings');
    assert.is(warnings.filter((w) => /out of file descriptors/.test(w)).length, 1, `the episode is logged once: ${JSON.stringify(warnings)}`);
    await opened;
    await call('release');
    // Descriptors are free again: a new open and a write land.
    const peer = await me.transport.openPeer(descriptor);
    const r = await me.transport.submit(peer, batchOf([{ op: 'write', local: me.addrs[0]!, remote: descriptor.buffers[0]!.addr, length: local.length }]), {
      timeoutMs: 5000,
    });
    assert.equal(Array.from(r.statuses), [0]);
    assert.is(await call<number>('byte'), 0x5c);
  } finally {
    await me.transport.close();
    await target.close();
  }
}

test('tcp;ofi_rxm: out of descriptors, the rail does not spin, logs the episode once, and serves peers once descriptors are free', () =>
  descriptorCase('tcp;ofi_rxm'));

// libfabric's sockets provider accepts on a thread of its own, which polls its listener
// without pause while the accept fails: that spin is the provider's, out of te's reach.
test.skip(
  'sockets: out of descriptors, no spin — skipped: the sockets provider accepts on its own libfabric thread, which spins while accept fails (use tcp;ofi_rxm)',
);
console.log('skip sockets descriptor case: the sockets provider accepts on its own libfabric thread, which spins while accept fails');

test.run();
