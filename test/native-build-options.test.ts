import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The plugins' native build (native/scripts/plugin-native.mjs) refuses a malformed job count
// or unity-build switch with a message naming the setting, before it starts cmake.
const plugin = join(dirname(fileURLToPath(import.meta.url)), '..', 'plugins', 'mooncake-shm');

for (const bad of ['-1', '0', 'four', '2.5', '100000']) {
  test(`TE_BUILD_JOBS=${JSON.stringify(bad)} is refused with exit 2 and the setting named`, () => {
    const r = spawnSync(process.execPath, ['scripts/native.mjs', 'build'], {
      cwd: plugin,
      encoding: 'utf8',
      env: { ...process.env, TE_BUILD_JOBS: bad },
      timeout: 30_000,
    });
    assert.is(r.status, 2, r.stdout + r.stderr);
    assert.match(r.stderr, /TE_BUILD_JOBS must be a whole number of compile jobs/);
    assert.not.match(r.stdout, /CMD BUILD|cmake/i);
  });
}

for (const bad of ['2', 'yes', 'on']) {
  test(`TE_UNITY_BUILD=${JSON.stringify(bad)} is refused with exit 2 and the setting named`, () => {
    const r = spawnSync(process.execPath, ['scripts/native.mjs', 'build'], {
      cwd: plugin,
      encoding: 'utf8',
      env: { ...process.env, TE_UNITY_BUILD: bad },
      timeout: 30_000,
    });
    assert.is(r.status, 2, r.stdout + r.stderr);
    assert.match(r.stderr, /TE_UNITY_BUILD must be 1 .* or 0/);
    assert.not.match(r.stdout, /CMD (BUILD|CONFIGURE|COMPILE)|cmake/i);
  });
}

test.run();
