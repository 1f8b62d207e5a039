// DescriptorHoard leaves the process without a free descriptor, and gives them back.
import { closeSync, openSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cpuSeconds, DescriptorHoard } from '../src/index.js';

const openFails = (): string | undefined => {
  try {
    closeSync(openSync('/dev/null', 'r'));
    return undefined;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code;
  }
};

test('exhaust leaves no descriptor free; releaseOne frees exactly one; releaseAll frees the rest', () => {
  const hoard = new DescriptorHoard();
  try {
    assert.ok(hoard.exhaust() > 0);
    assert.is(openFails(), 'EMFILE');
    assert.is(hoard.exhaust(), 0, 'nothing was left to take');
    assert.ok(hoard.releaseOne());
    const one = openSync('/dev/null', 'r');
    assert.is(openFails(), 'EMFILE', 'only one was freed');
    closeSync(one);
  } finally {
    hoard.releaseAll();
  }
  assert.is(openFails(), undefined);
  assert.not.ok(hoard.releaseOne(), 'none is held after releaseAll');
});

test('cpuSeconds counts the CPU a process used', () => {
  // Spin for 100 ms of CPU time as Node counts it, not of wall time: on a busy host a wall-clock
  // spin gets only the host's share of a CPU.
  const before = cpuSeconds(process.pid);
  const start = process.cpuUsage();
  while (process.cpuUsage(start).user + process.cpuUsage(start).system < 100_000);
  const used = cpuSeconds(process.pid) - before;
  assert.ok(used >= 0.08, `cpuSeconds saw ${used} s of the 0.1 s used`);
});

test.run();
