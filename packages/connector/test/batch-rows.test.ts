// The batch helpers for strided rows: selectRequests carries each side's rows and pitches
// with the requests it picks, and the spans count from the first row's start to the last
// row's end (the length where a request has no rows).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, batchOf, isTransferError, localSpan, remoteSpan, selectRequests } from '../src/index.js';

const batch = batchOf([
  { op: 'write', local: 0n, remote: 0n, length: 1024, rows: 4, localPitch: 1000 },
  { op: 'write', local: 8192n, remote: 8192n, length: 512, remoteRows: 2, remotePitch: 4096 },
  { op: 'write', local: 65536n, remote: 65536n, length: 300, rows: 3, localPitch: 200, remoteRows: 5, remotePitch: 60 },
]);

test('localSpan and remoteSpan: rows span from the first row to the end of the last, a plain request its length', () => {
  assert.equal(
    [0, 1, 2].map((i) => localSpan(batch, i)),
    [3n * 1000n + 256n, 512n, 2n * 200n + 100n],
  );
  assert.equal(
    [0, 1, 2].map((i) => remoteSpan(batch, i)),
    [1024n, 4096n + 256n, 4n * 60n + 60n],
  );
});

test("selectRequests keeps every side's rows and pitches with the requests it picks", () => {
  const out = selectRequests(batch, Uint32Array.of(2, 0));
  assert.equal(Array.from(out.localAddrs), [65536n, 0n]);
  assert.equal(Array.from(out.localRows!), [3, 4]);
  assert.equal(Array.from(out.localPitches!), [200n, 1000n]);
  assert.equal(Array.from(out.remoteRows!), [5, 1]);
  assert.equal(Array.from(out.remotePitches!), [60n, 0n]);
  assert.ok(out.remoteRows instanceof Uint32Array && out.remotePitches instanceof BigUint64Array);
  const plain = selectRequests(batchOf([{ op: 'read', local: 1n, remote: 2n, length: 3 }]), Uint32Array.of(0));
  assert.is(plain.localRows, undefined);
  assert.is(plain.remoteRows, undefined);
});

// A size that is not a count threw a RangeError or a TypeError from a typed array constructor.
test('allocateBatch refuses a size that is not a non-negative integer', () => {
  for (const n of [-1, 1.5, Number.NaN, 2 ** 60, 10n, '4']) {
    try {
      allocateBatch(n as never);
      assert.unreachable(`allocateBatch(${String(n)}) accepted`);
    } catch (e) {
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `allocateBatch(${String(n)}): ${String(e)}`);
      assert.match((e as Error).message, /Expected a batch size to be a non-negative integer/);
    }
  }
  assert.is(allocateBatch(0).lengths.length, 0);
  assert.is(allocateBatch(3).opcodes.length, 3);
});

// A safe integer past what a typed array holds threw V8's RangeError ("Invalid typed array length").
test('allocateBatch refuses a size past what a typed array holds with INVALID_ARGUMENT, V8 reason kept', () => {
  try {
    allocateBatch(2 ** 40);
    assert.unreachable('allocateBatch(2^40) accepted');
  } catch (e) {
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    // V8's reason differs by version: 'Invalid typed array length' (Node 20), 'Array buffer allocation failed' (Node 26).
    assert.match((e as Error).message, /^A batch of 1099511627776 requests cannot be allocated: (Invalid typed array length|Array buffer allocation failed)/);
    assert.ok((e as Error).cause instanceof RangeError);
  }
});

test.run();
