import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { exitOf } from '../src/child-exit.js';

const settlesWithin = (p: Promise<void>, ms: number): Promise<'settled' | 'pending'> => {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<'pending'>((r) => (timer = setTimeout(() => r('pending'), ms)));
  return Promise.race([p.then(() => 'settled' as const), pending]).finally(() => clearTimeout(timer));
};

// A child that was asked to stop and never ends (as one hung in process.exit() does): te
// cannot end while it runs, so the wait kills it past its grace.
test('a child that does not exit within its grace is killed, and the wait ends', async () => {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000); process.send?.("up")'], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  await once(child, 'message');
  try {
    assert.is(await settlesWithin(exitOf(child, 200), 10_000), 'settled', 'the wait never ended');
    assert.is(child.signalCode, 'SIGKILL');
  } finally {
    child.kill('SIGKILL');
  }
});

test('a child that exits within its grace is not killed; one already gone resolves at once', async () => {
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => process.exit(3), 100)'], { stdio: 'ignore' });
  await exitOf(child, 10_000);
  assert.is(child.exitCode, 3);
  assert.is(child.signalCode, null);
  assert.is(await settlesWithin(exitOf(child, 10_000), 1_000), 'settled');
});

test.run();
