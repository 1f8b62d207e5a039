import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { exitsWithin, stopProcess } from '../src/index.js';

/*
 * stopProcess() resolves only once the whole process is stopped: a test that stalls a peer
 * with it cannot race the signal. The child keeps two threads busy, the case in which
 * kill() returns while they still run.
 */

const busy = `const { Worker } = require('node:worker_threads');
for (let i = 0; i < 2; i++) new Worker('for (;;) {}', { eval: true });
setInterval(() => {}, 1000);
console.log('ready');`;

function spawnBusy(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', busy], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve) => child.stdout!.once('data', () => resolve(child)));
}

const statOf = (path: string): string[] => {
  const stat = readFileSync(path, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
};
const threadStates = (pid: number) => readdirSync(`/proc/${pid}/task`).map((t) => statOf(`/proc/${pid}/task/${t}/stat`)[0]);
/** utime + stime of the whole process, in clock ticks. */
const cpuTicks = (pid: number) => {
  const f = statOf(`/proc/${pid}/stat`);
  return Number(f[11]) + Number(f[12]);
};

test('every thread is stopped when stopProcess resolves, and the process uses no CPU until SIGCONT', async () => {
  const child = await spawnBusy();
  try {
    for (let round = 0; round < 20; round++) {
      await stopProcess(child.pid!);
      const states = threadStates(child.pid!);
      assert.ok(
        states.every((s) => s === 'T'),
        `round ${round}: thread states ${states.join('')} right after stopProcess`,
      );
      child.kill('SIGCONT');
    }
    await stopProcess(child.pid!);
    const before = cpuTicks(child.pid!);
    await new Promise((r) => setTimeout(r, 200));
    assert.is(cpuTicks(child.pid!), before, 'a stopped process used CPU');
    child.kill('SIGCONT');
    const resumed = Date.now();
    while (cpuTicks(child.pid!) === before && Date.now() - resumed < 5000) await new Promise((r) => setTimeout(r, 20));
    assert.ok(cpuTicks(child.pid!) > before, 'the process runs again after SIGCONT');
  } finally {
    child.kill('SIGKILL');
    await exitsWithin(child, 5000);
  }
});

test('stopProcess rejects for a process that is gone instead of waiting out its deadline', async () => {
  const child = await spawnBusy();
  child.kill('SIGKILL');
  await exitsWithin(child, 5000);
  const t0 = Date.now();
  try {
    await stopProcess(child.pid!, 3000);
    assert.unreachable('stopProcess resolved for a process that exited');
  } catch (e) {
    assert.ok(e instanceof Error && !(e instanceof assert.Assertion));
    assert.match(e.message, /gone|ESRCH/);
  }
  assert.ok(Date.now() - t0 < 1000);
});

test.run();
