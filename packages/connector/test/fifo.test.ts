import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Fifo } from '../src/engine/fifo.js';

test('takes in the order pushed, across the compaction of taken entries', () => {
  const q = new Fifo<number>();
  const taken: number[] = [];
  for (let i = 0; i < 5_000; i++) {
    q.push(i);
    if (i % 3 === 2) taken.push(q.take()!, q.take()!); // takes run behind pushes, so the head moves and is cut off
  }
  for (let v = q.take(); v !== undefined; v = q.take()) taken.push(v);
  assert.equal(
    taken,
    Array.from({ length: 5_000 }, (_, i) => i),
  );
  assert.is(q.length, 0);
  assert.is(q.take(), undefined);
});

test('keep drops what the predicate rejects and leaves the order; clear empties', () => {
  const q = new Fifo<number>();
  for (let i = 0; i < 10; i++) q.push(i);
  q.take();
  q.keep((v) => v % 2 === 0);
  assert.is(q.length, 4);
  assert.equal([q.take(), q.take(), q.take(), q.take(), q.take()], [2, 4, 6, 8, undefined]);
  q.push(1);
  q.clear();
  assert.is(q.length, 0);
});

test.run();
