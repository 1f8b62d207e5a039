// `te bench pd` subtracts a room's start, read in the runner, from its end, read in the decode
// rank: the clock it reads must be one clock across processes, not an origin of each process.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { monotonicMs } from '../src/bench/pd/clock.js';

const clockModule = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'bench', 'pd', 'clock.ts');

test("another process's reading falls between two of this process's", () => {
  for (let i = 0; i < 3; i++) {
    const before = monotonicMs();
    const child = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `const { monotonicMs } = await import(${JSON.stringify(clockModule)}); process.stdout.write(String(monotonicMs()));`,
      ],
      { encoding: 'utf8' },
    );
    const after = monotonicMs();
    assert.is(child.status, 0, child.stderr);
    const there = Number(child.stdout.trim());
    assert.ok(before <= there && there <= after, `the child read ${there} ms, outside this process's ${before}..${after} ms`);
  }
});

test.run();
