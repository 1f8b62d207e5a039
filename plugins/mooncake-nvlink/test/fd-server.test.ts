// The posix-fd server hands GPU memory handles only to processes of the same user
// (SO_PEERCRED), and does not spin while the process is out of descriptors. Its C++ test
// needs no GPU; the cross-user case needs root to change user (exit 77 without it).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const script = fileURLToPath(new URL('../scripts/native-test.sh', import.meta.url));
const crossUser = 'fd server: a process of another user is refused (AUTH_FAILED)';
const isRoot = process.getuid?.() === 0;
let run: SpawnSyncReturns<string> | undefined;
const runOnce = () => (run ??= spawnSync('sh', [script], { encoding: 'utf8', timeout: 120_000 }));

test('fd server: a process of this user is served, also once descriptors are free again after the process ran out (no spin meanwhile)', () => {
  const r = runOnce();
  assert.ok(r.status === 0 || (r.status === 77 && !isRoot), r.stdout + r.stderr);
});

if (isRoot) {
  test(crossUser, () => {
    const r = runOnce();
    assert.is(r.status, 0, r.stdout + r.stderr);
  });
} else {
  console.log(`  skipped "${crossUser}": changing user needs root`);
  test.skip(`${crossUser} — skipped: changing user needs root`, () => {});
}

test.run();
