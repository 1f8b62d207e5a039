import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/*
 * scripts/uvu.mjs, the runner behind every package's `npm test`: a test process that has
 * printed its totals but cannot exit (here an engine left open) fails the run within the
 * grace period, naming the handles that held it, instead of hanging the suite.
 */
const root = fileURLToPath(new URL('..', import.meta.url));

test('a test process that lingers after its totals is killed, its handles named, the run failed', () => {
  const started = Date.now();
  const r = spawnSync(process.execPath, ['scripts/uvu.mjs', 'test/fixtures/lingering', 'fixture\\.ts$'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, TE_TEST_EXIT_GRACE_MS: '2000' },
  });
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /Passed:\s+\S*1/);
  assert.match(r.stderr, /printed its totals but had not exited 2 s later; referenced libuv handles: .*\w.*; killed/);
  assert.ok(Date.now() - started < 60_000, `took ${Date.now() - started} ms`);
});

test.run();
