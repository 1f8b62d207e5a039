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
  const before = cpuSeconds(process.pid);
  const until = Date.now() + 100;
  while (Date.now() < until);
  assert.ok(cpuSeconds(process.pid) - before >= 0.05);
});

test.run();
