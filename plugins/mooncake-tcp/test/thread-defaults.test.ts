// I/O threads and lanes per peer default to the machine's size: 2 on small machines, one
// per 4 CPUs up to 4 (on 16 cores 4 threads and 4 lanes moved 1.27–1.42× the bytes of 2).
// The transport must actually start that many I/O threads, and explicit settings still win.
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseOptions, policyOfStat, usableCpus } from '@te/connector';
import { assertOptionRefused } from '@te/testkit';
import plugin from '../src/index.js';
import { defaultIoThreads } from '../src/thread-defaults.js';
import { localTransport, withLocalTransport } from './helpers.js';

/** The scheduling policy (stat field 41: 0 SCHED_OTHER, 3 SCHED_BATCH) of this process's I/O threads, one entry per thread. */
function ioThreadPolicies(): number[] {
  const policies: number[] = [];
  for (const t of readdirSync('/proc/self/task')) {
    try {
      if (!readFileSync(`/proc/self/task/${t}/comm`, 'utf8').startsWith('te-tcp-io')) continue;
      policies.push(policyOfStat(readFileSync(`/proc/self/task/${t}/stat`, 'utf8')) ?? -1);
    } catch {
      // the thread exited
    }
  }
  return policies;
}

/** This process's threads named by mooncake-tcp's I/O loops. */
function ioThreads(): number {
  return ioThreadPolicies().length;
}

/**
 * I/O threads started since `before` was counted, once `expected` of them have named
 * themselves (each names itself when it starts running) or 2 s have passed.
 */
async function newIoThreads(before: number, expected: number): Promise<number> {
  const until = Date.now() + 2000;
  while (ioThreads() - before < expected && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
  return ioThreads() - before;
}

test('the default follows the CPU count: 2 up to 11 CPUs, then one per 4 CPUs, at most 4', () => {
  const expected: Array<[number, number]> = [
    [1, 2],
    [2, 2],
    [8, 2],
    [11, 2],
    [12, 3],
    [16, 4],
    [64, 4],
    [256, 4],
  ];
  for (const [cores, threads] of expected) assert.is(defaultIoThreads(cores), threads, `${cores} CPUs`);
  const parsed = parseOptions(plugin.options, {}, {}, plugin.name);
  assert.is(parsed.ioThreads, defaultIoThreads(usableCpus()));
  assert.is(parsed.lanesPerPeer, defaultIoThreads(usableCpus()));
});

test('a transport with default options runs the default number of I/O threads; config and environment override it', async () => {
  const before = ioThreads();
  const byDefault = await localTransport(4096);
  const withDefault = await newIoThreads(before, defaultIoThreads());
  await byDefault.transport.close();
  assert.is(withDefault, defaultIoThreads());

  const configured = await localTransport(4096, { ioThreads: 5 });
  const withFive = await newIoThreads(before, 5);
  await configured.transport.close();
  assert.is(withFive, 5);

  assert.is(parseOptions(plugin.options, {}, { TE_TCP_IO_THREADS: '3', TE_TCP_LANES_PER_PEER: '6' }, plugin.name).ioThreads, 3);
  assert.is(parseOptions(plugin.options, {}, { TE_TCP_IO_THREADS: '3', TE_TCP_LANES_PER_PEER: '6' }, plugin.name).lanesPerPeer, 6);
});

// Woken by the JS thread, an I/O thread under SCHED_BATCH does not take its CPU at once
// (te/thread_policy.h); off by default (4 KiB reads lose), on with batchScheduling.
// describe() reports what the kernel says the threads run under.
test('the I/O threads run under the default policy, and under SCHED_BATCH with batchScheduling', async () => {
  const before = ioThreads();
  for (const [options, policy, reported] of [
    [{}, 0, 'SCHED_OTHER'],
    [{ batchScheduling: true }, 3, 'SCHED_BATCH'],
  ] as const) {
    await withLocalTransport(4096, { ioThreads: 2, ...options }, async (local) => {
      assert.is(await newIoThreads(before, 2), 2);
      assert.equal(ioThreadPolicies(), [policy, policy], JSON.stringify(options));
      assert.is(local.transport.describe?.().ioThreadPolicy, reported);
    });
  }
  assert.is(parseOptions(plugin.options, {}, { TE_TCP_BATCH_SCHEDULING: '1' }, plugin.name).batchScheduling, true);
  assertOptionRefused(
    plugin,
    [
      [{}, { TE_TCP_BATCH_SCHEDULING: 'maybe' }],
      [{ batchScheduling: 'yes' }, {}],
    ],
    /batchScheduling|TE_TCP_BATCH_SCHEDULING/,
  );
});

test.run();
