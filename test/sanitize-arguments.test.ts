import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// scripts/sanitize.sh takes all, core or transports; anything else is refused before any build
// (it used to run only the core's tests and report them clean).
const root = join(dirname(fileURLToPath(import.meta.url)), '..');

test('sanitize.sh refuses an unknown argument with its usage and exit 2', () => {
  const r = spawnSync('bash', ['scripts/sanitize.sh', 'everything'], { cwd: root, encoding: 'utf8', timeout: 30_000 });
  assert.is(r.status, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /usage: bash scripts\/sanitize\.sh \[all\|core\|transports\]/);
  assert.not.match(r.stdout, /sanitize: /);
});

test.run();
