// The benchmark tools' steady-state figures (bench/per-request.mjs, syscalls.mjs,
// allocations.mjs): the long run less the short one, and a pair run again when the host
// stalled one of them. The runs here are scripted results (what a run reports), so each
// case sees exactly the stall it is about, whatever the host does.
import * as assert from 'uvu/assert';
// @ts-expect-error: a plain .mjs helper of the benchmarks, without types
import { ATTEMPTS, measureSteadyState, runSteadyPair, stalledPairMessages, steadyDifference } from '../bench/lib/steady-state.mjs';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest("the benchmark tools' own checks");

interface Run {
  result: { requests: number };
  perThread: Record<string, { user: number; sys: number }>;
  jsLayers: Record<string, number>;
}
interface Difference extends Run {
  plugin: string;
  requests: number;
}

const run = (requests: number, user = 0, sys = 0, js = 0): Run => ({
  result: { requests },
  perThread: { 'initiator/io': { user, sys } },
  jsLayers: { engine: js },
});

/** A `once` that hands out the scripted runs in order and records the durations asked for. */
function scripted(runs: Run[]): { once: (seconds: number) => Promise<Run>; asked: number[] } {
  const asked: number[] = [];
  let next = 0;
  return {
    asked,
    once: (seconds) => {
      asked.push(seconds);
      if (next >= runs.length) throw new Error(`run ${next + 1} was not scripted`);
      return Promise.resolve(runs[next++]);
    },
  };
}

test('the difference is the long run less the short one, per thread and per JS layer, never below 0', () => {
  const long = run(9000, 0.5, 0.25, 0.125);
  long.perThread['target/io'] = { user: 0.1, sys: 0.1 };
  const short = run(3000, 0.25, 0.5, 0.5);
  const m = steadyDifference('mooncake-tcp', long, short) as Difference;
  assert.is(m.plugin, 'mooncake-tcp');
  assert.is(m.requests, 6000);
  assert.equal(m.perThread['initiator/io'], { user: 0.25, sys: 0 });
  // A thread the short run did not see counts whole.
  assert.equal(m.perThread['target/io'], { user: 0.1, sys: 0.1 });
  assert.is(m.jsLayers.engine, 0);
  assert.is(m.result, long.result);
});

test('a steady pair is measured once: the long run first, then a third of it', async () => {
  const s = scripted([run(9000), run(3000)]);
  const retries: number[] = [];
  const m = (await measureSteadyState('raw libfabric', s.once, 3, (n: number) => retries.push(n))) as Difference;
  assert.is(m.requests, 6000);
  assert.equal(s.asked, [3, 1]);
  assert.equal(retries, []);
});

test('a pair whose longer run moved no more requests is run again, and the next pair gives the figures', async () => {
  const s = scripted([run(3000), run(3000), run(9000, 1), run(3000)]);
  const retries: number[] = [];
  const m = (await measureSteadyState('mooncake-rdma', s.once, 3, (n: number) => retries.push(n))) as Difference;
  assert.is(m.requests, 6000);
  assert.equal(m.perThread['initiator/io'], { user: 1, sys: 0 });
  assert.equal(s.asked, [3, 1, 3, 1]);
  assert.equal(retries, [2]);
});

test('a host that stalls every pair gives no figures after the last attempt, and no run more', async () => {
  const stalled = Array.from({ length: 2 * ATTEMPTS }, (_, i) => run(i % 2 === 0 ? 1000 : 2000));
  const s = scripted(stalled);
  const retries: number[] = [];
  const m = (await measureSteadyState('mooncake-tcp', s.once, 3, (n: number) => retries.push(n))) as Difference;
  assert.ok(m.requests <= 0, `${m.requests} requests`);
  assert.is(s.asked.length, 2 * ATTEMPTS);
  assert.equal(
    retries,
    Array.from({ length: ATTEMPTS - 1 }, (_, i) => i + 2),
  );
});

test('a pair of runs that return at once (as strace runs do) takes the durations given, and what "moved" means', async () => {
  // bench/syscalls.mjs counts requests at the top level of a run and runs 4 s and 1 s.
  const runs = [{ requests: 500 }, { requests: 500 }, { requests: 900 }, { requests: 400 }];
  const asked: number[] = [];
  const retries: number[] = [];
  const once = (seconds: number) => {
    asked.push(seconds);
    return runs[asked.length - 1];
  };
  const moved = (long: { requests: number }, short: { requests: number }) => long.requests > short.requests;
  const pair = await runSteadyPair(once, 4, 1, moved, (n: number) => retries.push(n));
  assert.equal(pair, { long: { requests: 900 }, short: { requests: 400 } });
  assert.equal(asked, [4, 1, 4, 1]);
  assert.equal(retries, [2]);
});

test('a stalled host gets ATTEMPTS pairs from runSteadyPair, and the last pair comes back for the caller to refuse', async () => {
  const asked: number[] = [];
  const pair = await runSteadyPair(
    (seconds: number) => {
      asked.push(seconds);
      return { batches: 7 };
    },
    3,
    1,
    (long: { batches: number }, short: { batches: number }) => long.batches > short.batches,
  );
  assert.equal(pair, { long: { batches: 7 }, short: { batches: 7 } });
  assert.is(asked.length, 2 * ATTEMPTS);
});

test('the three tools say the same of a stalled pair: what ran again, and what was given up', () => {
  const m = stalledPairMessages('64 KiB write (4 × 4)', 'requests');
  assert.is(m.retry(2), `64 KiB write (4 × 4): the longer run moved no more requests than the shorter one; both run again (2 of ${ATTEMPTS})`);
  assert.is(
    m.givenUp('last: 5 in 4 s, 9 in 1 s'),
    `64 KiB write (4 × 4): in ${ATTEMPTS} tries the longer run moved no more requests than the shorter one (last: 5 in 4 s, 9 in 1 s; a stalled host?)`,
  );
  assert.is(
    stalledPairMessages('bench/allocations.mjs', 'batches').givenUp(),
    `bench/allocations.mjs: in ${ATTEMPTS} tries the longer run moved no more batches than the shorter one (a stalled host?)`,
  );
});

test.run();
