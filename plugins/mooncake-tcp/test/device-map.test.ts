import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/*
 * Which registered regions are device memory (native/device_map.h) must agree with the
 * registry at every moment a request can look: a device region is listed before the
 * registry publishes it, and delisted by its own registration's token after the registry
 * removed it, so a re-registration of the same address in between keeps its entry. The
 * addon's ordering needs a CUDA device to run; the map's half of it is checked here by a
 * small C++ program (header-only: built in a second), test/native/device_map_test.cpp.
 */
const root = fileURLToPath(new URL('..', import.meta.url));
const core = fileURLToPath(new URL('../../../native', import.meta.url));

test('DeviceMap: listing and delisting by token keep registered device regions device memory throughout', () => {
  const out = `${root}build/native-tests/device-map`;
  mkdirSync(out, { recursive: true });
  const cc = spawnSync(
    process.env.CXX ?? 'g++',
    ['-std=c++17', '-O1', '-g', '-Wall', '-Wextra', `-I${root}native`, `-I${core}/test`, `${root}test/native/device_map_test.cpp`, '-o', `${out}/device_map_test`, '-lpthread'],
    { encoding: 'utf8', timeout: 120_000 },
  );
  assert.is(cc.status, 0, cc.stderr);
  const r = spawnSync(`${out}/device_map_test`, [], { encoding: 'utf8', timeout: 60_000 });
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
});

test.run();
