import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { until } from '../src/index.js';

test('until resolves once the check holds', async () => {
  let n = 0;
  const timer = setInterval(() => n++, 2);
  try {
    await until('n to reach 3', () => n >= 3, 5_000);
    assert.ok(n >= 3);
  } finally {
    clearInterval(timer);
  }
});

test('until throws at its deadline, naming what did not happen (read then, when given as a function)', async () => {
  let seen = 0;
  const e = await until(
    () => `the target received ${seen} of 2 requests`,
    () => (seen++, false),
    30,
  ).then(
    () => undefined,
    (x: unknown) => x as Error,
  );
  assert.ok(e instanceof Error);
  assert.match(e.message, /^the target received \d+ of 2 requests: not within 30 ms$/);
  assert.ok(seen > 1, 'it polled more than once');
});

test.run();
