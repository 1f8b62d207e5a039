import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

// scripts/cxx-once.mjs: a package's C++ test command, run in CI's first Node.js line only.
const script = join(import.meta.dirname, '..', 'scripts', 'cxx-once.mjs');
const run = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', env: { ...process.env, TE_CI_SECOND_NODE: '', TE_CI_CXX_IN_SANITIZERS: '', ...env } });

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

test("in CI's npm test, where the sanitizer step runs every C++ test, the command does not run, and the line says why", () => {
  const r = run(['sh', '-c', 'exit 3'], { TE_CI_CXX_IN_SANITIZERS: '1' });
  assert.is(r.status, 0);
  assert.match(r.stdout, /skipped C\+\+ tests "sh -c exit 3": this CI builds and runs every C\+\+ test in its sanitizer step/);
});

test('every C++ test program npm test runs is one the sanitizer step builds and runs', () => {
  const sanitize = readFileSync(join(import.meta.dirname, '..', 'scripts', 'sanitize.sh'), 'utf8');
  const cmake = readFileSync(join(import.meta.dirname, '..', 'native', 'CMakeLists.txt'), 'utf8');
  // The core's ctest programs (npm test runs them through plugins/mooncake-tcp's test:native).
  for (const [, name] of cmake.matchAll(/add_test\(NAME (\w+)/g)) assert.ok(sanitize.includes(name), `${name} is not in scripts/sanitize.sh`);
  assert.ok(sanitize.includes('te_fabric_transport_tests'));
  // Each package's own C++ test script, as its package.json runs it.
  for (const script of [
    'plugins/mooncake-tcp/scripts/native-test.sh --tsan',
    'plugins/mooncake-shm/scripts/native-test.sh --tsan',
    'plugins/mooncake-wire/scripts/native-test.sh --tsan',
    'packages/staging/scripts/native-test.sh --tsan',
    'native/cuda/scripts/test.sh --tsan',
  ])
    assert.ok(
      sanitize.includes(script.replace('plugins/mooncake-tcp', '$tcp').replace('plugins/mooncake-shm', '$shm')),
      `${script} is not in scripts/sanitize.sh`,
    );
});

test.run();
