import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TransferError, isTransferError } from '@te/connector';
import { BytePool, resolveStaging } from '../src/index.js';
import { checkBuffers } from '../src/pd/local-buffers.js';
import type { KVBuffers } from '@te/connector';

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: unknown) => (isTransferError(e) ? e.code : String(e)),
  );

test('never hands out more than its capacity; a waiter is served first come, first served, when space frees', async () => {
  const pool = new BytePool(4096, 'ring');
  const a = await pool.alloc(2048, 'room-a', 1000);
  const b = await pool.alloc(2048, 'room-b', 1000);
  assert.is(pool.used, 4096);
  const order: string[] = [];
  const big = pool.alloc(3000, 'room-c', 1000).then((o) => (order.push('big'), o));
  const small = pool.alloc(64, 'room-d', 1000).then((o) => (order.push('small'), o));
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(order, [], 'nothing fits while the pool is full');
  pool.release(a);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(order, [], 'the large head waiter is not overtaken by the small one');
  pool.release(b);
  await Promise.all([big, small]);
  assert.equal(order, ['big', 'small']);
  assert.ok(pool.used <= 4096 && pool.peak <= 4096);
});

test('a request that can never fit is refused at once; one that waits past its deadline gets TIMEOUT', async () => {
  const pool = new BytePool(4096, 'ring');
  assert.is(await codeOf(pool.alloc(8192, 'r', 1000)), 'INVALID_ARGUMENT');
  await pool.alloc(4096, 'r', 1000);
  const t = Date.now();
  assert.is(await codeOf(pool.alloc(64, 'q', 50)), 'TIMEOUT');
  assert.ok(Date.now() - t >= 45);
});

test("a failed room's waiters are refused, and its pieces come back only when released", async () => {
  const pool = new BytePool(4096, 'ring');
  const held = await pool.alloc(4096, 'failed', 1000);
  const waiting = codeOf(pool.alloc(1024, 'failed', 5000));
  const other = pool.alloc(1024, 'other', 5000);
  pool.refuseWaiters('failed', new TransferError('ABORTED', 'room failed'));
  assert.is(await waiting, 'ABORTED');
  assert.is(pool.heldBy('failed'), 1, 'a piece a write may still use stays held');
  assert.ok(pool.owns('failed', held, 4096));
  pool.releaseOwner('failed');
  assert.ok((await other) >= 0, 'the space went to the next room');
  assert.is(pool.heldBy('failed'), 0);
});

test('neighbouring free pieces join again', async () => {
  const pool = new BytePool(4096, 'ring');
  const offs = [];
  for (let i = 0; i < 4; i++) offs.push(await pool.alloc(1024, 'r', 100));
  pool.release(offs[1]!);
  pool.release(offs[2]!);
  pool.release(offs[0]!);
  pool.release(offs[3]!);
  assert.is(await pool.alloc(4096, 'r', 100), 0);
});

test('staging options: defaults, environment and bad values', () => {
  const d = resolveStaging({}, {});
  assert.is(d.enabled, true);
  assert.is(d.ringBytes, 64 << 20);
  assert.is(d.ringExplicit, false);
  assert.is(resolveStaging({}, { TE_PD_STAGING: '0' }).enabled, false);
  assert.is(resolveStaging({}, { TE_PD_STAGING_RING_BYTES: '0' }).ringBytes, 0);
  assert.is(resolveStaging({}, { TE_PD_STAGING_RING_BYTES: '1048576' }).ringExplicit, true);
  assert.throws(() => resolveStaging({}, { TE_PD_STAGING: 'yes' }), /TE_PD_STAGING must be 0 or 1/);
  assert.is(resolveStaging({}, {}).transportGather, true);
  assert.is(resolveStaging({}, { TE_PD_TRANSPORT_GATHER: '0' }).transportGather, false);
  assert.is(resolveStaging({ transportGather: true }, { TE_PD_TRANSPORT_GATHER: '0' }).transportGather, true, 'the option wins over the environment');
  assert.throws(() => resolveStaging({}, { TE_PD_TRANSPORT_GATHER: 'no' }), /TE_PD_TRANSPORT_GATHER must be 0 or 1/);
  assert.is(resolveStaging({}, {}).transportScatter, true);
  assert.is(resolveStaging({}, { TE_PD_TRANSPORT_SCATTER: '0' }).transportScatter, false);
  assert.is(resolveStaging({ transportScatter: true }, { TE_PD_TRANSPORT_SCATTER: '0' }).transportScatter, true, 'the option wins over the environment');
  assert.throws(() => resolveStaging({}, { TE_PD_TRANSPORT_SCATTER: 'yes' }), /TE_PD_TRANSPORT_SCATTER must be 0 or 1/);
  assert.throws(() => resolveStaging({ bytes: 10 }, {}), /staging.bytes/);
  assert.throws(() => resolveStaging({}, { TE_PD_STAGING_BYTES: '1e6' }), /whole number/);
});

test('a page layout other than NHD or HND is refused with INVALID_ARGUMENT before anything is registered', () => {
  const group = { addrs: BigUint64Array.of(0x1000n, 0x2000n), lengths: BigUint64Array.of(4096n, 4096n), itemLengths: BigUint64Array.of(1024n, 1024n) };
  const buffers = {
    kv: group,
    attention: 'mha',
    numLayers: 1,
    pageSize: 4,
    kvCacheDtype: 'fp16',
    aux: { addrs: new BigUint64Array(0), lengths: new BigUint64Array(0), itemLengths: new BigUint64Array(0) },
    device: 'cpu',
  } as KVBuffers;
  const layout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
  checkBuffers({ ...buffers, pageLayout: 'HND' }, layout);
  try {
    checkBuffers({ ...buffers, pageLayout: 'HDN' as 'HND' }, layout);
    assert.unreachable('accepted');
  } catch (e) {
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    assert.match((e as Error).message, /pageLayout must be 'NHD' or 'HND', got HDN/);
  }
});

test.run();
