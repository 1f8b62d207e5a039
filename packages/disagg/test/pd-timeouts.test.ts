import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '@te/connector';
import { DEFAULT_PD_TIMEOUTS, resolveTimeouts } from '../src/index.js';

/*
 * PD timeouts from code and from SGLang's environment names: a timeout longer than a
 * Node.js timer holds (2^31 - 1 ms) would run after 1 ms and fail every room at once, so it
 * is refused (INVALID_CONFIG naming what was set) instead of taken.
 */
const MAX = 2_147_483_647;

function refusal(input: Parameters<typeof resolveTimeouts>[0], env: NodeJS.ProcessEnv = {}): Error {
  try {
    resolveTimeouts(input, env);
  } catch (e) {
    assert.ok(isTransferError(e, 'INVALID_CONFIG'), String(e));
    return e as Error;
  }
  throw new Error('accepted');
}

test('defaults, then the environment (seconds), then code', () => {
  assert.equal(resolveTimeouts({}, {}), DEFAULT_PD_TIMEOUTS);
  const t = resolveTimeouts({ abortMs: 1_000 }, { SGLANG_DISAGGREGATION_WAITING_TIMEOUT: '2.5', SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE: '4' });
  assert.is(t.waitingMs, 2_500);
  assert.is(t.heartbeatMaxFailures, 4);
  assert.is(t.abortMs, 1_000);
  assert.is(resolveTimeouts({ waitingMs: 7 }, { SGLANG_DISAGGREGATION_WAITING_TIMEOUT: '2.5' }).waitingMs, 7);
});

test('the longest timeout a timer holds is taken; one millisecond more is refused, naming the option', () => {
  assert.is(resolveTimeouts({ waitingMs: MAX }, {}).waitingMs, MAX);
  for (const k of ['bootstrapMs', 'waitingMs', 'abortMs', 'transferMs'] as const) {
    const e = refusal({ [k]: MAX + 1 });
    assert.match(e.message, new RegExp(`timeouts\\.${k}\` option \\(${MAX + 1} ms\\) to be at most ${MAX} ms`));
  }
});

test('heartbeatMs, waited for twice, is refused past half the limit', () => {
  const half = Math.floor(MAX / 2);
  assert.is(resolveTimeouts({ heartbeatMs: half }, {}).heartbeatMs, half);
  assert.match(refusal({ heartbeatMs: half + 1 }).message, /timeouts\.heartbeatMs` option .* to be at most 1073741823 ms/);
});

test('a timeout too long from the environment names the variable a user set', () => {
  const e = refusal({}, { SGLANG_DISAGGREGATION_WAITING_TIMEOUT: '3000000' });
  assert.match(e.message, /SGLANG_DISAGGREGATION_WAITING_TIMEOUT \(3000000 s\) to be at most 2147483647 ms \(24\.9 days\)/);
  assert.match(refusal({}, { SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT: '1e7' }).message, /SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT/);
});

test('non-positive and non-numeric values stay refused', () => {
  assert.match(refusal({ waitingMs: 0 }).message, /timeouts\.waitingMs` option to be a positive whole number of milliseconds, got 0/);
  // A fraction: the engine takes a batch's timeoutMs in whole milliseconds, so a transferMs
  // of 1500.5 used to be accepted here and then failed every write batch (INVALID_ARGUMENT).
  assert.match(refusal({ transferMs: 1500.5 }).message, /timeouts\.transferMs` option to be a positive whole number of milliseconds, got 1500\.5/);
  assert.match(refusal({ heartbeatMaxFailures: 1.5 }).message, /timeouts\.heartbeatMaxFailures` option to be a positive whole number, got 1\.5/);
  assert.match(refusal({}, { SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL: 'soon' }).message, /SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL/);
});

test.run();
