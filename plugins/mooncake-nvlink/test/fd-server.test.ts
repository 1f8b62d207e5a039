// The posix-fd server hands GPU memory handles only to processes of the same user
// (SO_PEERCRED). Its C++ test needs no GPU; the cross-user case needs root to change user.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const script = fileURLToPath(new URL('../scripts/native-test.sh', import.meta.url));
const name = 'fd server: a process of another user is refused (AUTH_FAILED), one of this user is served';

if (process.getuid?.() === 0) {
  test(name, () => {
    const r = spawnSync('sh', [script], { encoding: 'utf8', timeout: 120_000 });
    assert.is(r.status, 0, r.stdout + r.stderr);
  });
} else {
  console.log(`  skipped "${name}": changing user needs root`);
  test.skip(name, () => {});
}

test.run();
