import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { exitsWithin, isRunning, survivors } from '@te/testkit';

/*
 * A test process that dies (killed by a timeout, interrupted) must not leave its rank
 * processes behind: an orphaned rank keeps its ports, memory and engine threads until the
 * machine restarts. The rank exits when its IPC channel to the test closes.
 */
const harness = fileURLToPath(new URL('./pd-harness.ts', import.meta.url));

test('a rank process exits when the test process that started it is killed', async () => {
  const script = `const h = await import(${JSON.stringify(harness)}); const r = await h.spawnEC({ role: 'producer' }); process.stdout.write('rank-pid ' + r.child.pid + ' '); setInterval(() => {}, 1000);`;
  const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const pid = await new Promise<number>((resolve, reject) => {
    let out = '';
    parent.stdout!.on('data', (d) => {
      out += d;
      const m = out.match(/rank-pid (\d+) /);
      if (m) resolve(Number(m[1]));
    });
    parent.once('exit', (code) => reject(new Error(`the test process exited (${code}) before its rank was up:\n${out}`)));
    setTimeout(() => reject(new Error(`no rank pid within 60 s:\n${out}`)), 60_000).unref();
  }).catch((e) => {
    parent.kill('SIGKILL');
    throw e;
  });
  assert.ok(isRunning(pid), 'the rank runs');
  parent.kill('SIGKILL');
  const left = await survivors([pid], 15_000);
  assert.equal(left, [], `rank outlived the process that started it (threads: ${left.join('; ')})`);
});
test('a test that leaves a rank behind does not hold its test process open, and the rank exits with it', async () => {
  // As a test does whose sibling rank failed to start: the rank that did start is never closed.
  const script = `const h = await import(${JSON.stringify(harness)}); const r = await h.spawnEC({ role: 'producer' }); process.stdout.write('rank-pid ' + r.child.pid + ' ');`;
  const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  parent.stdout!.on('data', (d) => (out += d));
  const exited = await exitsWithin(parent, 60_000);
  assert.ok(exited, `the test process was held open by its rank:\n${out}`);
  const pid = Number(out.match(/rank-pid (\d+) /)?.[1]);
  assert.ok(pid > 0, `no rank pid:\n${out}`);
  const left = await survivors([pid], 15_000);
  assert.equal(left, [], `rank outlived the test process that left it behind (threads: ${left.join('; ')})`);
});

test.run();
