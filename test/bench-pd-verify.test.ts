import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { onceTest } from './fixtures/node-lines.js';

/*
 * The PD benchmarks' verifier sees the timed bytes (bench/pd.mjs, and bench/pd-tail.mjs,
 * which uses the same verifier): one byte flipped in a decode rank's pages after a timed room
 * fails the run (nonzero exit, the case named, `verified: false`);
 * the run without the flip is `npm run bench:pd`, which the documented-commands test runs.
 * Smoke sizes (TE_BENCH_QUICK).
 */
const test = onceTest("the PD benchmarks' verifier's own checks");
const root = fileURLToPath(new URL('..', import.meta.url));
const run = (extra: string[], script = 'bench/pd.mjs') =>
  spawnSync(process.execPath, [script, ...extra], { cwd: root, env: { ...process.env, TE_BENCH_QUICK: '1' }, encoding: 'utf8', timeout: 240_000 });

test('bench/pd.mjs fails when one byte of a timed room is corrupted', () => {
  const r = run(['--corrupt', '--json']);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /TP 2→4 NHD room \d+: decode rank 0 heads \[\d+, \d+\) do not hold what prefill rank 0 sent/);
  const last = JSON.parse(r.stdout.trim().split('\n').pop()!);
  assert.is(last.verified, false);
});

test('bench/pd-tail.mjs fails when one byte of a timed room is corrupted', () => {
  const r = run(['--corrupt', '--json'], 'bench/pd-tail.mjs');
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /checksums off room \d+: decode rank 0 heads \[0, 8\) do not hold what prefill rank 0 sent/);
  assert.match(r.stderr, /cases verified: 1 of 2/);
  const last = JSON.parse(r.stdout.trim().split('\n').pop()!);
  assert.is(last.verified, false);
});

test('bench/pd.mjs refuses --rooms and --warmup that are not a whole number of rooms, at least 1', () => {
  for (const [name, value, max] of [
    ['rooms', '0', 1000],
    ['rooms', 'abc', 1000],
    ['warmup', '0', 100],
    ['warmup', '1.5', 100],
  ] as const) {
    const r = run([`--${name}`, value]);
    assert.is(r.status, 2, `--${name} ${value}: exit ${r.status}\n${r.stderr}`);
    assert.is(r.stderr.split('\n')[0], `Expected --${name} to be an integer from 1 to ${max}, got "${value}"`);
    assert.is(r.stdout, '', 'nothing ran');
  }
});

test.run();
