import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TeConfigInput } from '@te/connector';
import { readFile } from 'node:fs/promises';
import { closeAll, spawnEC, type ECProcess } from './pd-harness.js';

/** The scheduler state letter of a process (T: stopped). */
async function readState(pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

/*
 * Encoder-cache transfer across processes: a producer saves embeddings in its pool, consumers
 * pull them into their own registered memory; every loaded byte is compared with the
 * embedding the producer computed.
 */
const RDMA: TeConfigInput = {
  connector: 'mooncake-rdma',
  bindAddress: '127.0.0.1',
  transportOptions: { 'mooncake-rdma': { provider: 'tcp;ofi_rxm', connectTimeoutMs: 2000 } },
};
const MiB = 1 << 20;

for (const [name, config] of [
  ['mooncake-tcp', undefined],
  ['mooncake-rdma (tcp;ofi_rxm)', RDMA],
] as const) {
  test(`items arrive byte-exact over ${name}; two consumers pull the same items; an unknown hash is reported failed`, async () => {
    const ranks: ECProcess[] = [];
    try {
      const [p, c1, c2] = await Promise.all([
        spawnEC({ role: 'producer', config, poolBytes: 32 * MiB }),
        spawnEC({ role: 'consumer', config }),
        spawnEC({ role: 'consumer', config }),
      ]);
      ranks.push(p, c1, c2);
      const params: Record<string, unknown> = {};
      for (const [hash, length] of [
        ['img-a', MiB],
        ['img-b', 3 * MiB + 17],
        ['vid-c', 8 * MiB],
      ] as const)
        params[hash] = (await p.call('save', { hash, length })).params;
      params['img-missing'] = { ...(params['img-a'] as object) };
      const [r1, r2] = await Promise.all([c1.call('load', { params }), c2.call('load', { params })]);
      for (const r of [r1, r2]) {
        assert.equal(r.loaded, ['img-a', 'img-b', 'vid-c']);
        assert.equal(r.mismatches, []);
        assert.equal(r.failed, [{ hash: 'img-missing', code: 'PEER_NOT_FOUND' }]);
      }
      assert.is((await p.call('stats')).pulls, 2);
    } finally {
      await closeAll(ranks);
    }
  });
}

test('a producer killed before the pull: the items are reported failed within the timeout, waitForLoad resolves', async () => {
  const ranks: ECProcess[] = [];
  try {
    const [p, c] = await Promise.all([spawnEC({ role: 'producer' }), spawnEC({ role: 'consumer', loadTimeoutMs: 1_500 })]);
    ranks.push(p, c);
    const params = { x: (await p.call('save', { hash: 'x', length: 4096 })).params };
    p.kill('SIGKILL');
    const r = await c.call('load', { params }, 15_000);
    assert.equal(r.loaded, []);
    assert.is(r.failed.length, 1);
    assert.ok(['TIMEOUT', 'PEER_UNREACHABLE', 'CONNECTION_LOST'].includes(r.failed[0].code!), r.failed[0].code);
    assert.ok(r.ms < 1_500 + 2_000 + 5_000, `${r.ms} ms`);
  } finally {
    await closeAll(ranks);
  }
});

test('eviction never frees an item while it is being written to a stalled consumer; the consumer, resumed, reads the right bytes', async () => {
  const ranks: ECProcess[] = [];
  try {
    const big = 256 * MiB;
    const [p, c, c2] = await Promise.all([
      spawnEC({ role: 'producer', poolBytes: big + 64 * MiB, maxPulls: 1 }),
      spawnEC({ role: 'consumer', destBytes: big, loadTimeoutMs: 30_000 }),
      spawnEC({ role: 'consumer', destBytes: big }),
    ]);
    ranks.push(p, c, c2);
    const params = { a: (await p.call('save', { hash: 'a', length: big })).params };
    // The consumer asks for `a` and stops itself once the first bytes landed: the producer's
    // write of 256 MiB is then stuck in flight, with `a` pinned.
    const loading = c.call('load', { params, stopMidWrite: true }, 60_000);
    const deadline = Date.now() + 10_000;
    while ((await readState(c.child.pid!)) !== 'T' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.is(await readState(c.child.pid!), 'T', 'the consumer stopped mid-write');
    const b = await p.call('save', { hash: 'b', length: big }); // needs a's range
    assert.is(b.code, 'POOL_EXHAUSTED', `save while 'a' is read: ${b.message ?? 'succeeded'}`);
    assert.is((await p.call('stats')).evictions, 0);
    // The producer serves one pull at a time here: another consumer is refused at once (bounded), not queued.
    const t = Date.now();
    const refused = await c2.call('load', { params }, 20_000);
    assert.equal(refused.failed, [{ hash: 'a', code: 'POOL_EXHAUSTED' }]);
    assert.ok(Date.now() - t < 4_000, `refused in ${Date.now() - t} ms`);
    c.child.kill('SIGCONT');
    const r = await loading;
    assert.is(r.stopped, 'mid-write');
    assert.equal(r.loaded, ['a']);
    assert.equal(r.mismatches, []);
    // Once the transfer settled, `a` may be evicted.
    const b2 = await p.call('save', { hash: 'b', length: big });
    assert.ok(b2.params, b2.message);
    assert.is((await p.call('stats')).evictions, 1);
    const small = (await p.call('save', { hash: 'c', length: MiB })).params;
    assert.equal((await c2.call('load', { params: { c: small } })).loaded, ['c'], 'the pull slot was freed');
  } finally {
    await closeAll(ranks);
  }
});

test('a load given up at its timeout keeps its late answer out of the next load; close waits for the abandoned pull', async () => {
  const ranks: ECProcess[] = [];
  try {
    const [p, c] = await Promise.all([spawnEC({ role: 'producer', poolBytes: 96 * MiB }), spawnEC({ role: 'consumer', destBytes: 64 * MiB })]);
    ranks.push(p, c);
    const params = { x: (await p.call('save', { hash: 'x', length: 64 * MiB })).params };
    // 64 MiB cannot be pulled within 1 ms: the first load reports x failed (TIMEOUT); its
    // answer arrives later, and the second load (nothing started) must not report it.
    const r = await c.call('load', { params, waitTimeoutMs: 1, closeAfter: true, againAfterMs: 2_000 }, 30_000);
    assert.equal(r.loaded, []);
    assert.equal(r.failed, [{ hash: 'x', code: 'TIMEOUT' }]);
    assert.is(r.landedAtClose, true, 'close waited for the abandoned pull: its destination is no longer being written');
    assert.is((await p.call('stats')).pulls, 1, 'the pull did reach the producer');
    assert.equal(r.again, { loaded: [], failed: [] });
  } finally {
    await closeAll(ranks);
  }
});

test('closing a producer waits for the pulls it is serving before freeing its pool', async () => {
  const ranks: ECProcess[] = [];
  try {
    const big = 256 * MiB;
    const [p, c] = await Promise.all([
      spawnEC({ role: 'producer', poolBytes: big + MiB }),
      spawnEC({ role: 'consumer', destBytes: big, loadTimeoutMs: 30_000 }),
    ]);
    ranks.push(p, c);
    const params = { a: (await p.call('save', { hash: 'a', length: big })).params };
    const loading = c.call('load', { params, stopMidWrite: true }, 60_000);
    const deadline = Date.now() + 10_000;
    while ((await readState(c.child.pid!)) !== 'T' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.is(await readState(c.child.pid!), 'T', 'the consumer stopped mid-write');
    let closed = false;
    const closing = p.call('closeProducer', {}, 60_000).then((v) => ((closed = true), v));
    await new Promise((r) => setTimeout(r, 1_000));
    assert.is(closed, false, 'close returned while a pull was still writing from the pool');
    c.child.kill('SIGCONT');
    const r = await loading;
    assert.is(r.stopped, 'mid-write');
    assert.equal(r.loaded, ['a']);
    assert.equal(r.mismatches, []);
    assert.equal(await closing, { poolRegistered: false });
  } finally {
    await closeAll(ranks);
  }
});

test.run();
