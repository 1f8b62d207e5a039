// The conformance suite itself must fail what it claims to check: a transport that ignores
// its deadline (the engine's watchdog releasing the caller) fails the deadline case, an
// honest one passes, and the cases left out are counted as skipped.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const fixture = fileURLToPath(new URL('./fixtures/deadline-suite.ts', import.meta.url));
const run = (stall: string) =>
  spawnSync(process.execPath, ['--import', 'tsx', fixture], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, TE_STALL: stall, FORCE_COLOR: '0' } });

test('a transport that ignores timeoutMs fails the deadline case', () => {
  const r = run('ignores');
  assert.is.not(r.status, 0, r.stdout);
  assert.match(r.stdout, /watchdog/);
});

test('one that honours it passes, with the other cases registered as skipped', () => {
  const r = run('honest');
  assert.is(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /Passed:\s+1/);
  assert.match(r.stdout, /Skipped:\s+13/);
});

// uvu's own formatter throws on a thrown value without a name, which used to end the suite
// silently: the case counted neither as passed nor as failed, and the exit status was 0.
test('a case that throws a value that is not an Error fails, and says what was thrown', () => {
  const r = run('throws');
  assert.is.not(r.status, 0, r.stdout);
  assert.match(r.stdout, /FAIL/);
  assert.match(r.stdout, /not an Error: undefined/);
});

// A TransferError carries `details` (an object), where uvu expects its own diff text: its
// formatter threw on it the same way, hiding the failure and the cases after it.
test('a case that throws a TransferError with details fails, and shows its code, message and details', () => {
  const r = run('throws-details');
  assert.is.not(r.status, 0, r.stdout);
  assert.match(r.stdout, /FAIL/);
  assert.match(r.stdout, /TIMEOUT/);
  assert.match(r.stdout, /the stall timed out/);
  assert.match(r.stdout, /settled: false/);
});

test.run();
