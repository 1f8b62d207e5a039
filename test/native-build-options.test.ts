import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
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

// The addon is replaced as a new file renamed over it, never rewritten in place: this
// process (and any other) may have it loaded, and truncating a mapped shared object kills
// the process with SIGBUS at its next touch of the object's pages (a later test's dlopen
// reading its soname did, two test files on).
function replace(file: string, bytes: string | Buffer): void {
  writeFileSync(`${file}.tmp`, bytes);
  renameSync(`${file}.tmp`, file);
}

// nx's build cache restores build/Release (its outputs) without the objects and CMake cache
// beside it, and ninja then takes the restored addon for up to date: an addon of another
// configuration (built without libfabric) stayed, and doctor's rebuild command changed
// nothing. The build links again an addon it did not link itself.
test('an addon in build/Release that this build folder did not link (as a cache restores one) is linked again', () => {
  const build = () => spawnSync(process.execPath, ['scripts/native.mjs', 'build'], { cwd: plugin, encoding: 'utf8', timeout: 300_000 });
  const first = build(); // this folder's own link, recorded
  assert.is(first.status, 0, first.stdout + first.stderr);
  const addon = join(plugin, 'build', 'Release', 'te_mooncake_shm.node');
  const linked = readFileSync(addon);
  // Loaded here, as earlier tests of this process load it: its pages must stay readable.
  const loaded = createRequire(import.meta.url)(addon) as { statusName(status: number): string };
  try {
    replace(addon, 'an addon from somewhere else');
    assert.is(loaded.statusName(0), 'OK', 'the loaded addon still runs after the file was replaced');
    const again = build();
    assert.is(again.status, 0, again.stdout + again.stderr);
    assert.match(again.stderr, /te_mooncake_shm\.node is not the one this build folder linked \(restored from a cache\?\): linking it again/);
    assert.ok(readFileSync(addon).equals(linked), 'the addon was not linked again from the build folder');
    // Once linked here, the next build leaves it alone.
    const third = build();
    assert.is(third.status, 0, third.stdout + third.stderr);
    assert.not.match(third.stderr, /not the one this build folder linked/);
  } finally {
    if (!readFileSync(addon).equals(linked)) replace(addon, linked);
  }
  assert.is(loaded.statusName(0), 'OK', 'the loaded addon still runs after the rebuilds');
});

test.run();
