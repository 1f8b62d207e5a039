import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PageAllocator } from '../src/demo/pipeline/pages.js';

test('the demo page allocator hands out every page once, for any page count', () => {
  for (const count of [1, 2, 7, 14, 120, 168, 343, 1000]) {
    const a = new PageAllocator(count);
    const pages = a.allocate(count);
    assert.is(new Set(pages).size, count, `${count} pages: duplicates handed out`);
    assert.throws(() => a.allocate(1), /out of KV pages/);
    const back = Math.min(3, count);
    a.release(pages.subarray(0, back));
    assert.is(a.allocate(back).length, back);
  }
});

test.run();
