import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Deadlines, type Deadline } from '../src/timing/deadlines.js';

/*
 * Many deadlines on one timer (the batches of a transport, the engine's watchdog): each
 * queued entry expires once, in deadline order and never early; a removed one never does;
 * an idle queue does not keep the process alive.
 */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type TestEntry = Deadline & { firedAt: number; expired: Promise<void> };

/** An entry that records its expiry in `fired`; `expired` settles when it does. */
function entry(name: string, fired: string[], then?: () => void): TestEntry {
  let done!: () => void;
  const expired = new Promise<void>((r) => (done = r));
  return {
    at: 0,
    slot: -1,
    firedAt: 0,
    expired,
    expire() {
      this.firedAt = performance.now();
      fired.push(name);
      done();
      then?.();
    },
  };
}

/**
 * Waits for `e` to expire, failing after `ms`: the tests wait for the expiry they mean, not for
 * a sleep that a loaded machine can outlast. The queue expires in deadline order, so once an
 * entry has expired, every entry with an earlier deadline that was going to expire has too.
 */
async function expiry(e: TestEntry, what: string, ms = 5_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not expired within ${ms} ms`)), ms)));
  try {
    await Promise.race([e.expired, late]);
  } finally {
    clearTimeout(timer);
  }
}

test('entries expire once each, in deadline order, not before their time; removed ones never', async () => {
  const q = new Deadlines();
  const fired: string[] = [];
  const entries = [
    ['c', 60],
    ['a', 20],
    ['gone', 30],
    ['b', 40],
    ['d', 80],
  ].map(([name, ms]) => ({ e: entry(name as string, fired), ms: ms as number }));
  for (const { e, ms } of entries) q.add(e, ms);
  q.remove(entries[2]!.e);
  q.remove(entries[2]!.e); // not queued: nothing happens
  assert.is(q.size, 4);
  await expiry(entries[4]!.e, 'd, the last deadline');
  assert.equal(fired, ['a', 'b', 'c', 'd']);
  for (const { e } of entries.filter((x) => x.e.firedAt > 0)) assert.ok(e.firedAt >= e.at, `expired ${(e.at - e.firedAt).toFixed(2)} ms early`);
  assert.is(q.size, 0);
});

test('an entry added with an earlier deadline than the timer is set for expires on time', async () => {
  const q = new Deadlines();
  const fired: string[] = [];
  q.add(entry('late', fired), 5_000);
  const early = entry('early', fired);
  const start = performance.now();
  q.add(early, 30);
  // Set for the 5 s entry, the timer would expire the early one with it: waiting 2.5 s sees that.
  await expiry(early, 'the early entry, behind a timer set for 5 s', 2_500);
  assert.equal(fired, ['early']);
  assert.ok(early.firedAt - start < 2_500, `expired after ${(early.firedAt - start).toFixed(0)} ms`);
  q.clear();
});

test('the earliest entry leaving does not lose the next: the timer fires, finds nothing due, and is set again', async () => {
  const q = new Deadlines();
  const fired: string[] = [];
  const first = entry('first', fired);
  const second = entry('second', fired);
  q.add(first, 20);
  q.add(second, 60);
  q.remove(first);
  await expiry(second, 'the second entry');
  assert.equal(fired, ['second']);
});

test('a heap of many entries with mixed deadlines, half removed at random, expires the rest in order', async () => {
  const q = new Deadlines();
  const fired: string[] = [];
  const all: { e: Deadline; ms: number; name: string }[] = [];
  let seed = 7;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let i = 0; i < 400; i++) {
    const name = String(i);
    const e = entry(name, fired);
    const ms = 10 + Math.floor(rand() * 90);
    q.add(e, ms);
    all.push({ e, ms, name });
  }
  const kept = all.filter(() => rand() < 0.5);
  for (const x of all) if (!kept.includes(x)) q.remove(x.e);
  assert.is(q.size, kept.length);
  // Past every deadline above: once it has expired, a removed entry that was going to has too.
  const last = entry('last', []);
  q.add(last, 150);
  await expiry(last, 'an entry after all the others');
  assert.is(fired.length, kept.length);
  const at = new Map(kept.map((x) => [x.name, x.e.at]));
  for (let i = 1; i < fired.length; i++) assert.ok(at.get(fired[i - 1]!)! <= at.get(fired[i]!)!, 'out of deadline order');
});

test('an expire that adds and removes entries (a cancel settling at once) is safe', async () => {
  const q = new Deadlines();
  const fired: string[] = [];
  const other = entry('other', fired);
  const again = entry('again', fired);
  q.add(other, 40);
  q.add(
    entry('first', fired, () => {
      q.remove(other);
      q.add(again, 10);
    }),
    10,
  );
  const after = entry('after', fired);
  q.add(after, 100); // past the removed entry's 40 ms
  await expiry(after, 'an entry after the removed one');
  assert.equal(fired, ['first', 'again', 'after']);
});

test('a deadline past what a Node.js timer can hold waits in steps, without a TimeoutOverflowWarning', async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    const q = new Deadlines();
    const fired: string[] = [];
    q.add(entry('far', fired), 2 ** 31 + 5_000);
    await sleep(50);
    assert.equal(fired, []);
    assert.equal(warnings, []);
    q.clear();
  } finally {
    process.off('warning', onWarning);
  }
});

test('a queue with entries keeps the process alive; an empty one does not', async () => {
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const before = timers();
  const q = new Deadlines();
  const e = entry('x', []);
  q.add(e, 60_000);
  assert.is(timers(), before + 1, 'a queued deadline holds the process');
  q.remove(e);
  assert.is(timers(), before, 'an empty queue holds nothing');
  q.add(e, 60_000);
  assert.is(timers(), before + 1, 'queued again, held again');
  q.clear();
  assert.is(timers(), before);
});

test('an expire that throws is reported as uncaught, and the entries due beside it and after it still expire', async () => {
  const q = new Deadlines();
  const fired: string[] = [];
  const uncaught: unknown[] = [];
  const listeners = process.listeners('uncaughtException');
  process.removeAllListeners('uncaughtException');
  process.on('uncaughtException', (e) => uncaught.push(e));
  try {
    q.add(
      entry('thrower', fired, () => {
        throw new Error('cancel failed');
      }),
      10,
    );
    q.add(entry('beside', fired), 10);
    const after = entry('after', fired);
    q.add(after, 60);
    await expiry(after, 'the entry after the one that threw');
    assert.equal(fired, ['thrower', 'beside', 'after']);
    assert.equal(
      uncaught.map((e) => (e as Error).message),
      ['cancel failed'],
    );
  } finally {
    process.removeAllListeners('uncaughtException');
    for (const l of listeners) process.on('uncaughtException', l);
  }
});

test('an entry queued twice is refused', () => {
  const q = new Deadlines();
  const e = entry('x', []);
  q.add(e, 1_000);
  assert.throws(() => q.add(e, 1_000), /already queued/);
  q.clear();
});

test.run();
