import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/*
 * A fuzzer's reproducer is replayed as its failure message says
 * (`node --import tsx fuzz/control-decode.ts --replay <file>...`): the seed argument of a
 * fuzzing run is not read from the file list.
 */
const root = fileURLToPath(new URL('..', import.meta.url));

test('fuzz/control-decode.ts --replay runs the given inputs through every stage', () => {
  const inputs = ['fuzz/corpus/control_plane/abort', 'fuzz/corpus/control_plane/descriptor'];
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'fuzz/control-decode.ts', '--replay', ...inputs], { cwd: root, encoding: 'utf8', timeout: 60_000 });
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /control_decode: replayed 2 input\(s\), no failure/);
  assert.match(r.stdout, /stat::client_path_units: 2\n/);
});

test.run();
