import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, StatusCell, TransferError, combineStatus, isTransferError, kvStatusName } from '../src/index.js';

test('statuses are ordered as SGLang orders KVPoll', () => {
  assert.ok(KVStatus.Failed < KVStatus.Bootstrapping);
  assert.ok(KVStatus.Bootstrapping < KVStatus.WaitingForInput);
  assert.ok(KVStatus.WaitingForInput < KVStatus.Transferring);
  assert.ok(KVStatus.Transferring < KVStatus.Success);
  assert.is(kvStatusName(KVStatus.WaitingForInput), 'WaitingForInput');
});

test('ranks combine by MIN', () => {
  assert.is(combineStatus([KVStatus.Success, KVStatus.Transferring, KVStatus.Success]), KVStatus.Transferring);
  assert.is(combineStatus([KVStatus.Success, KVStatus.Failed]), KVStatus.Failed);
  assert.is(combineStatus([]), KVStatus.Success);
});

test('status only moves forward and emits each change once', () => {
  const cell = new StatusCell();
  const seen: number[] = [];
  cell.on('status', (s) => seen.push(s));
  assert.ok(cell.advance(KVStatus.Transferring));
  assert.not.ok(cell.advance(KVStatus.WaitingForInput), 'no going back');
  assert.not.ok(cell.advance(KVStatus.Transferring), 'no repeat');
  assert.ok(cell.advance(KVStatus.Success));
  assert.equal(seen, [KVStatus.Transferring, KVStatus.Success]);
  assert.not.ok(cell.fail(new TransferError('TIMEOUT', 'late')), 'Success is final');
});

test('Failed is sticky and keeps the first error', () => {
  const cell = new StatusCell();
  const first = new TransferError('PEER_FAILED', 'gone');
  assert.ok(cell.fail(first));
  assert.not.ok(cell.fail(new TransferError('TIMEOUT', 'second')));
  assert.not.ok(cell.advance(KVStatus.Success));
  assert.is(cell.value, KVStatus.Failed);
  assert.is(cell.error, first);
});

test('reached() resolves on progress and rejects on failure', async () => {
  const cell = new StatusCell();
  const waiting = cell.reached(KVStatus.Transferring);
  cell.advance(KVStatus.WaitingForInput);
  cell.advance(KVStatus.Success);
  assert.is(await waiting, KVStatus.Success);
  assert.is(await cell.reached(KVStatus.Bootstrapping), KVStatus.Success, 'already past');

  const failing = new StatusCell();
  const p = failing.reached(KVStatus.Success);
  failing.fail(new TransferError('ABORTED', 'decode aborted'));
  try {
    await p;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ABORTED'));
  }
});

test('reached() has a deadline and honours an AbortSignal', async () => {
  const cell = new StatusCell();
  try {
    await cell.reached(KVStatus.Success, { timeoutMs: 20 });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'TIMEOUT'));
    assert.match((e as Error).message, /did not reach Success within 20 ms \(now Bootstrapping\)/);
  }
  const ac = new AbortController();
  const p = cell.reached(KVStatus.Success, { signal: ac.signal });
  ac.abort();
  try {
    await p;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ABORTED'));
  }
  assert.is(cell.listenerCount('status'), 0, 'waiters clean up after themselves');
});

test('reached() refuses a status that does not exist, a timeout no timer holds, a signal that is not one (INVALID_ARGUMENT), and waits on', async () => {
  const cell = new StatusCell();
  const refusals: [number, { timeoutMs?: number; signal?: AbortSignal }, RegExp][] = [
    [7, {}, /a KVStatus \(0 to 4\) to wait for, got 7/],
    [-1, {}, /got -1/],
    [KVStatus.Success, { timeoutMs: 3e9 }, /`timeoutMs` option to be an integer of milliseconds from 0 to 2147483647, got 3000000000/],
    [KVStatus.Success, { timeoutMs: -5 }, /got -5/],
    [KVStatus.Success, { timeoutMs: Number.NaN }, /got NaN/],
    [KVStatus.Success, { signal: {} as AbortSignal }, /`signal` option to be an AbortSignal/],
  ];
  for (const [target, options, message] of refusals) {
    const e = await cell.reached(target as KVStatus, options).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${target} ${JSON.stringify(options)}: ${String(e)}`);
    assert.match((e as Error).message, message);
  }
  assert.is(cell.listenerCount('status'), 0);
  // The longest timeout is a real wait: progress, not the timer, answers it.
  const waiting = cell.reached(KVStatus.Transferring, { timeoutMs: 2_147_483_647 });
  await new Promise((r) => setTimeout(r, 20));
  cell.advance(KVStatus.Transferring);
  assert.is(await waiting, KVStatus.Transferring);
});

test.run();
