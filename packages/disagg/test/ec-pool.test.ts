import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '@te/connector';
import { PoolAllocator } from '../src/index.js';

const codeOf = (f: () => unknown): string | undefined => {
  try {
    f();
  } catch (e) {
    return isTransferError(e) ? e.code : 'Error';
  }
  return undefined;
};

test('allocator: first fit, oldest unpinned evicted first, neighbours coalesce', () => {
  const evicted: string[] = [];
  const a = new PoolAllocator(1024, (it) => evicted.push(it.key));
  const x = a.allocate('x', 300); // [0, 320)
  const y = a.allocate('y', 300); // [320, 640)
  a.allocate('z', 300); // [640, 960)
  assert.equal([x.offset, y.offset], [0, 320]);
  a.allocate('w', 600); // no room: evicts x, then y (coalesced into [0, 640))
  assert.equal(evicted, ['x', 'y']);
  assert.is(a.get('w')!.offset, 0);
  assert.is(a.count, 2);
});

test('allocator: eviction takes the least recently used first (a touched item is kept)', () => {
  for (const [touched, want] of [
    [[], ['x']],
    [['x'], ['y']],
    [['x', 'y'], ['z']],
    [['y', 'x', 'z'], ['y']],
  ] as const) {
    const evicted: string[] = [];
    const a = new PoolAllocator(960, (it) => evicted.push(it.key));
    for (const k of ['x', 'y', 'z']) a.allocate(k, 320);
    for (const k of touched) a.touch(k);
    a.allocate('w', 320);
    assert.equal(evicted, want, `touched ${touched.join(',') || 'none'}`);
  }
});

test('allocator: pinned items are never evicted; nothing evictable → POOL_EXHAUSTED at once', () => {
  const evicted: string[] = [];
  const a = new PoolAllocator(1024, (it) => evicted.push(it.key));
  for (const k of ['a', 'b', 'c']) a.allocate(k, 300).pins = 1;
  // "At once": the call returns (it is synchronous, so a retry loop would never return) with
  // the typed error, having evicted nothing and changed nothing. No clock: a bound in
  // milliseconds would time the machine's load, not the allocator.
  assert.is(
    codeOf(() => a.allocate('d', 300)),
    'POOL_EXHAUSTED',
  );
  assert.equal(evicted, [], 'nothing evicted by a refused allocation');
  assert.is(a.get('d'), undefined);
  assert.is(a.count, 3);
  a.get('b')!.pins = 0;
  assert.is(a.allocate('d', 300).offset, 320, 'the unpinned one is evicted, its range reused');
  assert.ok(a.get('a') && a.get('c'));
});

test('allocator: an item larger than the pool, a duplicate key, a bad length are refused', () => {
  const a = new PoolAllocator(1024);
  assert.is(
    codeOf(() => a.allocate('big', 2048)),
    'INVALID_ARGUMENT',
  );
  a.allocate('k', 10);
  assert.is(
    codeOf(() => a.allocate('k', 10)),
    'INVALID_ARGUMENT',
  );
  assert.is(
    codeOf(() => a.allocate('n', 0)),
    'INVALID_ARGUMENT',
  );
  assert.is(
    codeOf(() => a.delete('k')),
    undefined,
  );
  assert.is(a.freeBytes, 1024);
});

test('allocator: fragmentation is bounded by eviction order, never an endless loop', () => {
  const a = new PoolAllocator(64 * 100);
  for (let i = 0; i < 100; i++) a.allocate(`i${i}`, 64);
  for (let i = 0; i < 100; i += 2) a.get(`i${i}`)!.pins = 1; // every other slot pinned
  assert.is(
    codeOf(() => a.allocate('wide', 128)),
    'POOL_EXHAUSTED',
  ); // free slots never adjacent
  assert.is(a.count, 50);
});

test.run();
