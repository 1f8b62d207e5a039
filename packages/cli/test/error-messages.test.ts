import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/* What a user reads when something is wrong: the cause, named once, with what to do. */
const te = fileURLToPath(new URL('../bin/te.js', import.meta.url));
const thrower = fileURLToPath(new URL('./fixtures/throwing-plugin.mjs', import.meta.url));
const env: NodeJS.ProcessEnv = { ...process.env, FORCE_COLOR: '0' };
for (const k of Object.keys(env)) if (/^(TE|MC)_/.test(k)) delete env[k];
const run = (args: string[]) => spawnSync(process.execPath, [te, ...args], { encoding: 'utf8', timeout: 60_000, env });

test('a module path that does not exist is reported as such, not as a package to install', () => {
  const r = run(['doctor', '--module-path', '/nonexistent/my-plugin']);
  assert.is(r.status, 1);
  assert.match(r.stdout, /module path \/nonexistent\/my-plugin does not exist/);
  assert.not.match(r.stdout + r.stderr, /npm install/);
});

test('a plugin whose create() throws is named with the phase and the cause; no second "target exited" line', () => {
  const r = run(['bench', '--loopback', '--module-path', thrower, '--duration', '0.2']);
  assert.ok(r.status !== 0);
  assert.match(r.stderr, /plugin "thrower" failed to create its transport \(create\(\)\): boom/);
  assert.not.match(r.stderr, /bench target exited/);
});

test('doctor prints a long reason shared by several plugins once', () => {
  const r = run(['doctor']);
  const reasons = new Map<string, number>();
  for (const m of r.stdout.matchAll(/unavailable\s+\S.*?; (no CUDA device[^;]*)/g)) reasons.set(m[1]!, (reasons.get(m[1]!) ?? 0) + 1);
  assert.equal([...reasons.values()].filter((n) => n > 1), [], 'a long reason repeated on several rows');
  if (/see note \[1\]/.test(r.stdout)) assert.match(r.stdout, /^\s+\[1\] /m);
});

test.run();
