import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BatchTracker, NATIVE_STATUS, checkSubmit, allocateBatch, isTransferError, loadNativeAddon } from '../src/index.js';

const here = dirname(fileURLToPath(import.meta.url));

function tracker() {
  const cancels: [number, number][] = [];
  const t: BatchTracker = new BatchTracker('demo', (id, status) => {
    cancels.push([id, status]);
    // Native code completes a cancelled batch with the cancel status.
    t.complete(id, status, new Int32Array([status]), 0n);
  });
  return { t, cancels };
}

test('a completed batch resolves; per-request memory errors stay in statuses', async () => {
  const { t } = tracker();
  const ok = t.track(1, 'peer', { timeoutMs: 1000 });
  t.complete(1, 0, Int32Array.from([0, NATIVE_STATUS.ADDRESS_OUT_OF_RANGE]), 10n);
  const r = await ok;
  assert.equal([...r.statuses], [0, -2]);
  assert.is(r.bytes, 10n);
  assert.is(t.size, 0);
});

test('a connection-level request status rejects the batch with statuses attached', async () => {
  const { t } = tracker();
  const p = t.track(2, 'peer-b', { timeoutMs: 1000 });
  t.complete(2, 0, Int32Array.from([0, NATIVE_STATUS.CONNECTION_LOST]), 5n, 'lane reset');
  try {
    await p;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'CONNECTION_LOST'));
    assert.match((e as Error).message, /\[demo\] batch to "peer-b" failed: lane reset/);
    assert.equal([...(e as { statuses: Int32Array }).statuses], [0, -101]);
  }
});

test("a cancelled batch's message carries the transport's reason when it gives one", async () => {
  const { t } = tracker();
  const p = t.track(9, 'peer-c', { timeoutMs: 10_000 });
  t.complete(9, NATIVE_STATUS.TIMEOUT, new Int32Array([NATIVE_STATUS.TIMEOUT]), 0n, 'its connection was reset; the peer confirmed it');
  try {
    await p;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'TIMEOUT'));
    assert.match((e as Error).message, /\[demo\] batch to "peer-c" timed out; its connection was reset; the peer confirmed it/);
  }
});

test('native code saying a write may still land at the peer puts remoteMayBeWritten in the details; otherwise it is absent', async () => {
  const { t } = tracker();
  const flagged = t.track(10, 'peer-d', { timeoutMs: 10_000 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  const plain = t.track(11, 'peer-d', { timeoutMs: 10_000 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.complete(10, NATIVE_STATUS.ABORTED, new Int32Array([NATIVE_STATUS.ABORTED]), 0n, 'transport closed', true);
  t.complete(11, NATIVE_STATUS.ABORTED, new Int32Array([NATIVE_STATUS.ABORTED]), 0n, 'transport closed', false);
  const a = await flagged;
  assert.ok(isTransferError(a, 'ABORTED'), String(a));
  assert.equal(a.details, { peer: 'peer-d', bytes: 0n, remoteMayBeWritten: true });
  const b = await plain;
  assert.ok(isTransferError(b, 'ABORTED'), String(b));
  assert.equal(b.details, { peer: 'peer-d', bytes: 0n });
});

test('deadline and abort ask native code to cancel, and the batch rejects with that code', async () => {
  const { t, cancels } = tracker();
  const late = t.track(3, 'p', { timeoutMs: 20 });
  try {
    await late;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'TIMEOUT'));
  }
  const ac = new AbortController();
  const aborted = t.track(4, 'p', { timeoutMs: 10_000, signal: ac.signal });
  ac.abort();
  try {
    await aborted;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ABORTED'));
  }
  assert.equal(cancels, [
    [3, NATIVE_STATUS.TIMEOUT],
    [4, NATIVE_STATUS.ABORTED],
  ]);
});

test('abandonAll rejects what is pending; a late completion is ignored', async () => {
  const t = new BatchTracker('demo', () => {});
  const p = t.track(5, 'p', { timeoutMs: 10_000 });
  t.abandonAll('transport closed');
  try {
    await p;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ABORTED'));
    assert.match((e as Error).message, /transport closed; batch to "p" abandoned/);
  }
  t.complete(5, 0, new Int32Array(0), 0n);
  assert.is(t.size, 0);
});

test('checkSubmit refuses malformed submissions', () => {
  const b = allocateBatch(2);
  assert.throws(() => checkSubmit('demo', 'p', { ...b, lengths: new BigUint64Array(1) }, { timeoutMs: 10 }), /batch arrays differ in length/);
  assert.throws(() => checkSubmit('demo', 'p', b, { timeoutMs: 0 }), /timeoutMs/);
  // Whole milliseconds a timer can hold, as the engine asks (a transport may be driven directly).
  for (const timeoutMs of [2.5, 0.5, NaN, Infinity, 2 ** 31])
    assert.throws(
      () => checkSubmit('demo', 'p', b, { timeoutMs }),
      (e: unknown) => isTransferError(e, 'INVALID_ARGUMENT') && /`timeoutMs` to be an integer of milliseconds from 1 to 2147483647/.test((e as Error).message),
      `timeoutMs ${timeoutMs}`,
    );
  checkSubmit('demo', 'p', b, { timeoutMs: 2 ** 31 - 1 });
  assert.throws(() => checkSubmit('demo', 'p', b, { timeoutMs: 10, notify: new Uint8Array(70_000) }), /at most 65536 bytes/);
  const ac = new AbortController();
  ac.abort();
  assert.throws(() => checkSubmit('demo', 'p', b, { timeoutMs: 10, signal: ac.signal }), /aborted before it was submitted/);
});

test('checkSubmit answers a batch or options of the wrong shape with INVALID_ARGUMENT, not a TypeError', () => {
  const b = allocateBatch(1);
  const junk: [unknown, unknown, RegExp][] = [
    [null, { timeoutMs: 10 }, /a batch must be an object of typed arrays .*got null/],
    [[{ op: 'write' }], { timeoutMs: 10 }, /`opcodes` must be a Uint8Array, got undefined/],
    [{ ...b, localAddrs: [1n] }, { timeoutMs: 10 }, /`localAddrs` must be a BigUint64Array, got Array/],
    [{ ...b, lengths: new Uint32Array(1) }, { timeoutMs: 10 }, /`lengths` must be a BigUint64Array, got Uint32Array/],
    [b, undefined, /submit options must be an object .*got undefined/],
  ];
  for (const [batch, options, message] of junk)
    assert.throws(
      () => checkSubmit('demo', 'p', batch as never, options as never),
      (e: unknown) => isTransferError(e, 'INVALID_ARGUMENT') && message.test((e as Error).message),
      String(message),
    );
});

test('loadNativeAddon lists every path tried and the fixes', () => {
  try {
    loadNativeAddon({
      plugin: 'demo',
      file: 'te_demo.node',
      packageRoot: '/nonexistent/pkg',
      envVar: 'TE_DEMO_ADDON',
      solutions: ['build it: npm run build:native'],
      env: { TE_DEMO_ADDON: '/nope/te_demo.node' },
    });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'PLUGIN_LOAD_FAILED'));
    const m = (e as Error).message;
    for (const part of [
      '/nope/te_demo.node: not found',
      '/nonexistent/pkg/build/Release/te_demo.node: not found',
      '/nonexistent/pkg/build/Debug/te_demo.node',
      'build it: npm run build:native',
      'point TE_DEMO_ADDON at a built te_demo.node',
    ]) {
      assert.ok(m.includes(part), `missing: ${part}`);
    }
  }
});

test('loadNativeAddon hands the addon the TransferError factory', () => {
  const addon = loadNativeAddon<{ fail(status: number, message: string): never }>({
    plugin: 'demo',
    file: 'te_demo.node',
    packageRoot: '/nonexistent/pkg',
    envVar: 'TE_DEMO_ADDON',
    env: { TE_DEMO_ADDON: join(here, 'fixtures', 'fake-addon.cjs') },
  });
  try {
    addon.fail(NATIVE_STATUS.BAD_FRAME, 'bad magic');
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'BAD_FRAME'));
    assert.is((e as { plugin?: string }).plugin, 'demo');
  }
});

test.run();
