import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { exitsWithin, survivors } from '../src/index.js';

/*
 * A worker that calls exitWithParent() ends when its parent exits, even while V8's
 * background tasks wait for a main-thread garbage collection: the state in which
 * process.exit() hangs for good under Node.js 26 (nodejs/node#54918). The workers run
 * with --stress-concurrent-allocation, which keeps such tasks waiting all the time.
 */
/** Enough workers to load a 2-core machine: the hang needs a main thread that is slow to come back to a collection. */
const COUNT = 12;
const parentScript = fileURLToPath(new URL('./fixtures/orphan-parent.ts', import.meta.url));

test('workers end with their parent, even while V8 background tasks wait for a collection', async () => {
  const parent = spawn(process.execPath, ['--import', 'tsx', parentScript], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TE_ORPHAN_COUNT: String(COUNT) },
  });
  let out = '';
  parent.stdout!.on('data', (d) => (out += d));
  const exited = await exitsWithin(parent, 60_000);
  const pids = (out.match(/pids ([\d,]+)/)?.[1] ?? '').split(',').filter(Boolean).map(Number);
  assert.ok(exited, `the parent did not exit within 60 s:\n${out}`);
  assert.is(pids.length, COUNT, `the parent did not start its workers:\n${out}`);
  const left = await survivors(pids, 15_000);
  assert.equal(left, [], `workers outlived their parent by 15 s: ${left.join('; ')}`);
});

test.run();
