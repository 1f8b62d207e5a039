import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isRunning } from '@te/testkit';
import { fileURLToPath } from 'node:url';

/*
 * scripts/uvu.mjs, the runner behind every package's `npm test`, never waits forever: a test
 * process that has printed its totals but cannot exit (here an engine left open), one whose
 * test never ends, and a process the tests left running each fail the run within a bound,
 * named, instead of hanging the suite.
 */
const root = fileURLToPath(new URL('..', import.meta.url));
// The runs below are fixtures, not part of this suite's totals: the root summary (TE_TEST_SUMMARY) must not count them.
const { TE_TEST_SUMMARY: _summary, ...fixtureEnv } = process.env;
/** The runner over one fixture folder under test/fixtures, as a package's `npm test` runs it. */
const runFixture = (folder: string, env: NodeJS.ProcessEnv = {}) =>
  spawnSync(process.execPath, ['scripts/uvu.mjs', `test/fixtures/${folder}`, 'fixture\\.ts$'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...fixtureEnv, ...env },
  });

test('a test process that lingers after its totals is killed, its handles named, the run failed', () => {
  const started = Date.now();
  const r = runFixture('lingering', { TE_TEST_EXIT_GRACE_MS: '2000' });
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /Passed:\s+\S*1/);
  assert.match(r.stderr, /printed its totals but had not exited 2 s later; referenced libuv handles: .*\w.*; killed/);
  assert.ok(Date.now() - started < 60_000, `took ${Date.now() - started} ms`);
});

test('a test process killed by a signal before its totals fails the run, naming the signal', () => {
  // Node prints nothing when native code faults: without the runner's line, a log ends
  // mid-file with no reason given.
  const r = runFixture('killed');
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /the test process was killed by SIGTERM before uvu printed its totals/);
});

test('a process the tests left running is named and killed, and the run fails, without waiting for it', () => {
  const started = Date.now();
  const r = runFixture('left-running');
  assert.is(r.status, 1, r.stdout + r.stderr);
  // Its one test passed: the run fails for the process alone.
  assert.match(r.stdout, /Passed:\s+\S*1/);
  const left = r.stderr.match(/the test process left 1 process running when it ended, killed: (\d+) \(.*setTimeout/);
  assert.ok(left, r.stderr);
  // The worker would have lived 10 minutes, holding the runner's output pipe open.
  assert.ok(Date.now() - started < 60_000, `took ${Date.now() - started} ms`);
  // Gone, or a zombie: dead, waiting for whichever process adopted it to collect it.
  assert.not.ok(isRunning(Number(left[1])), 'the worker still runs');
});

test('a worker that follows its parent (it exits once its IPC channel closes) is not a process left running', () => {
  const r = runFixture('follows-parent');
  assert.is(r.status, 0, r.stdout + r.stderr);
  assert.not.match(r.stderr, /left \d+ process/);
});

test('a test that never ends is stopped at the deadline, naming the file and how far it got', () => {
  const started = Date.now();
  const r = runFixture('hung', { TE_TEST_DEADLINE_MS: '3000' });
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(
    r.stderr,
    /had not printed its totals 3 s after it started; it was in fixture\.ts, after 1 of its tests had ended; referenced libuv handles: .*timer.*; killed/,
  );
  assert.ok(Date.now() - started < 60_000, `took ${Date.now() - started} ms`);
});

test('a failure uvu cannot print by itself is printed, and the tests after it run', () => {
  // uvu 0.5's formatter throws on an error whose details are an object (every TransferError
  // with details) or on a thrown non-Error, and then drops that failure and the rest of the
  // suite, printing "(0 / 1)" in green: the runner's guard gives it an Error it can print.
  const r = runFixture('unprintable');
  // eslint-disable-next-line no-control-regex
  const out = r.stdout.replace(/\x1b\[[0-9;]*m/g, '');
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(out, /TransferError \[TIMEOUT\]: the fixture timed out \(details: \{ settled: false, peer: 'p1' \}\)/);
  assert.match(out, /a value that is not an Error was thrown: \{ reason: 'not an Error' \}/);
  // Both passing tests ran: 2 of 4.
  assert.match(out, /\(2 \/ 4\)/);
  assert.match(out, /Total:\s+4/);
  assert.match(out, /Passed:\s+2/);
  // The stack of the original error is kept: it names the fixture's line.
  assert.match(out, /unprintable\/fixture\.ts:7/);
});

test("the guard patches only uvu's formatter, and refuses a uvu whose formatter it does not recognise", async () => {
  const hooks = (await import(new URL('../scripts/lib/uvu-report-guard-hooks.mjs', import.meta.url).href)) as {
    load: (url: string, context: object, next: (url: string, context: object) => { format: string; source: string }) => { source: string };
  };
  const uvuUrl = 'file:///x/node_modules/uvu/dist/index.mjs';
  const source = "function format(name, err, suite = '') {\n\tlet { details } = err;\n}";
  const patched = hooks.load(uvuUrl, {}, () => ({ format: 'module', source })).source;
  assert.match(patched, /function format\(name, err, suite = ''\) \{\n\terr = globalThis\.__teReportableError\(err\);/);
  // Any other module passes through untouched.
  assert.is(hooks.load('file:///x/src/format.js', {}, () => ({ format: 'module', source })).source, source);
  // Another uvu whose formatter reads differently: loading fails rather than letting failures vanish.
  assert.throws(() => hooks.load(uvuUrl, {}, () => ({ format: 'module', source: 'function format(name, err) {}' })), /update the guard for this uvu version/);
});

/** scripts/uvu-parallel.mjs over test/fixtures, `jobs` files at a time, the files not matching `keep` left out. */
const runParallel = (jobs: number, keep: string[], env: NodeJS.ProcessEnv = {}) => {
  const others = ['follows-parent', 'hung', 'killed', 'left-running', 'lingering', 'side-by-side', 'unprintable'].filter((f) => !keep.includes(f));
  return spawnSync(
    process.execPath,
    ['scripts/uvu-parallel.mjs', '--jobs', String(jobs), 'test/fixtures', 'fixture\\.ts$', ...others.flatMap((f) => ['-i', f])],
    {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...fixtureEnv, ...env },
    },
  );
};

test('the parallel runner runs two files at once, each through the runner, and sums their counts into one summary row', () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-uvu-parallel-'));
  try {
    const summary = join(dir, 'summary.jsonl');
    writeFileSync(join(dir, 'log'), '');
    const r = runParallel(2, ['side-by-side', 'follows-parent'], { TE_FIXTURE_LOG: join(dir, 'log'), TE_TEST_SUMMARY: summary });
    assert.is(r.status, 0, r.stdout + r.stderr);
    // Each side-by-side file passes only while the other one runs.
    assert.match(readFileSync(join(dir, 'log'), 'utf8'), /start a\n[\s\S]*start b|start b\n[\s\S]*start a/);
    assert.match(r.stdout, /Files:\s+3 of 3, 2 at a time/);
    const rows = readFileSync(summary, 'utf8').trim().split('\n');
    assert.is(rows.length, 1, rows.join('\n'));
    assert.equal(pick(JSON.parse(rows[0]!)), { total: 3, passed: 3, skipped: 0, failed: 0 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the parallel runner fails when one file fails, prints that file whole, and names it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-uvu-parallel-'));
  try {
    const summary = join(dir, 'summary.jsonl');
    const r = runParallel(2, ['follows-parent', 'unprintable', 'left-running'], { TE_TEST_SUMMARY: summary });
    // eslint-disable-next-line no-control-regex
    const out = r.stdout.replace(/\x1b\[[0-9;]*m/g, '');
    assert.is(r.status, 1, r.stdout + r.stderr);
    // The failing file's own report, not cut by the other files' lines.
    assert.match(out, /a value that is not an Error was thrown: \{ reason: 'not an Error' \}/);
    assert.match(r.stderr, /test\/fixtures\/left-running\/fixture\.ts: the test process left 1 process running when it ended/);
    assert.match(r.stderr, /2 test files did not pass: .*unprintable\/fixture\.ts \(exit 1\)/);
    assert.match(r.stderr, /left-running\/fixture\.ts \(exit 1\)/);
    // unprintable: 2 of 4 failed; left-running: its test passed but the file failed.
    assert.equal(pick(JSON.parse(readFileSync(summary, 'utf8').trim())), { total: 6, passed: 4, skipped: 0, failed: 2 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the parallel runner with one job runs the files one after the other', () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-uvu-parallel-'));
  try {
    writeFileSync(join(dir, 'log'), '');
    // Each side-by-side file waits for the other to start: one at a time, the first gives up.
    const r = runParallel(1, ['side-by-side'], { TE_FIXTURE_LOG: join(dir, 'log'), TE_FIXTURE_WAIT_MS: '2000' });
    assert.is(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /1 test file did not pass: side-by-side\/a\.fixture\.ts \(exit 1\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const pick = (row: { total: number; passed: number; skipped: number; failed: number }) => ({
  total: row.total,
  passed: row.passed,
  skipped: row.skipped,
  failed: row.failed,
});

test.run();
