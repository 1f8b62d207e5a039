import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/*
 * Which registered regions are device memory (native/device_map.h) must agree with the
 * registry at every moment a request can look: a device region is listed before the
 * registry publishes it, and delisted by its own registration's token after the registry
 * removed it, so a re-registration of the same address in between keeps its entry. The
 * addon's ordering needs a CUDA device to run; the map's half of it is checked here by a
 * small C++ program (header-only: built in a second), test/native/device_map_test.cpp,
 * built and run by scripts/device-map-test.sh (which scripts/sanitize.sh also runs).
 */
const root = fileURLToPath(new URL('..', import.meta.url));

test('DeviceMap: listing and delisting by token keep registered device regions device memory throughout', () => {
  const r = spawnSync('sh', [`${root}scripts/device-map-test.sh`], { encoding: 'utf8', timeout: 180_000 });
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
});

test('an unknown mode is refused with the usage line and status 2, before anything is built', () => {
  const r = spawnSync('sh', [`${root}scripts/device-map-test.sh`, '--msan'], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, CXX: 'false' } });
  assert.is(r.status, 2, `${r.stdout}\n${r.stderr}`);
  assert.is(r.stderr.trim(), 'usage: sh scripts/device-map-test.sh [--tsan|--asan-ubsan]');
});

test.run();
