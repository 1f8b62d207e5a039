import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MAX_TIMER_MS, checkMilliseconds, isTransferError } from '../src/index.js';

function refusal(value: unknown, min: number, max?: number, why?: string): string {
  try {
    checkMilliseconds('the `waitMs` option', value, min, max, why);
  } catch (e) {
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    return (e as Error).message;
  }
  throw new Error(`${String(value)} was accepted`);
}

test('whole milliseconds within the bounds are returned as given', () => {
  assert.is(checkMilliseconds('x', 0, 0), 0);
  assert.is(checkMilliseconds('x', 1, 1), 1);
  assert.is(checkMilliseconds('x', MAX_TIMER_MS, 1), MAX_TIMER_MS);
  assert.is(checkMilliseconds('x', 600_000, 1, 600_000), 600_000);
});

test('anything else is INVALID_ARGUMENT naming the option, the bounds and the value', () => {
  // Past MAX_TIMER_MS a Node.js timer runs after 1 ms: the default upper bound.
  assert.is(refusal(MAX_TIMER_MS + 1, 1), 'Expected the `waitMs` option to be an integer of milliseconds from 1 to 2147483647, got 2147483648');
  for (const bad of [0, -1, 1.5, Number.NaN, Infinity, '100', 10n, null, undefined]) assert.match(refusal(bad, 1), /from 1 to 2147483647, got /);
  assert.is(
    refusal(600_001, 1, 600_000, 'what a peer accepts'),
    'Expected the `waitMs` option to be an integer of milliseconds from 1 to 600000 (what a peer accepts), got 600001',
  );
});

test.run();
