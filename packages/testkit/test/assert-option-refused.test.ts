import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { assertOptionRefused } from '../src/index.js';

// A plugin's options as its spec declares them: one integer with bounds and an environment name.
const plugin = {
  name: 'probe',
  options: { depth: { type: 'integer', default: 4, min: 1, max: 8, env: 'TE_PROBE_DEPTH', description: 'how deep' } },
} as const;

test('passes when every case is refused with INVALID_CONFIG naming the option', () => {
  assertOptionRefused(
    plugin,
    [
      [{ depth: 0 }, {}],
      [{}, { TE_PROBE_DEPTH: 'deep' }],
    ],
    /depth|TE_PROBE_DEPTH/,
  );
});

// uvu's own assert.throws passes its assertion errors through, so the failure is caught here.
function failureOf(f: () => void): string {
  try {
    f();
  } catch (e) {
    return (e as Error).message;
  }
  return 'no failure';
}

test('fails when a case is accepted, or refused with a message that does not name the option', () => {
  assert.match(
    failureOf(() => assertOptionRefused(plugin, [[{ depth: 2 }, {}]], /depth/)),
    /accepted \{"depth":2\}/,
  );
  assert.match(
    failureOf(() => assertOptionRefused(plugin, [[{ depth: 0 }, {}]], /no such name/)),
    /no such name/,
  );
});

test.run();
