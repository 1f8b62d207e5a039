import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

// scripts/cxx-once.mjs: a package's C++ test command, run in CI's first Node.js line only.
const script = join(import.meta.dirname, '..', 'scripts', 'cxx-once.mjs');
const run = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', env: { ...process.env, TE_CI_SECOND_NODE: '', ...env } });

test('without a command it exits 2 with its usage on stderr', () => {
  const r = run([]);
  assert.is(r.status, 2);
  assert.match(r.stderr, /usage: node scripts\/cxx-once\.mjs <command>/);
});

test("the command runs with its own options and its exit status is the script's", () => {
  assert.is(run(['sh', '-c', 'exit 3']).status, 3);
  assert.is(run(['sh', '-c', 'test "$1" = --tsan', 'sh', '--tsan']).status, 0);
});

test("in CI's second Node.js line the command does not run, and the line says why", () => {
  const r = run(['sh', '-c', 'exit 3'], { TE_CI_SECOND_NODE: '1' });
  assert.is(r.status, 0);
  assert.match(r.stdout, /skipped C\+\+ tests "sh -c exit 3": they do not load Node\.js/);
});

test.run();
