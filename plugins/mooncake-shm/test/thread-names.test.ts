// The transport's threads carry names (top, perf and /proc show whose CPU time is whose):
// the target's copy threads and server loop, the initiator's client loop. Closing joins them.
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseOptions, policyOfStat } from '@te/connector';
import { assertOptionRefused } from '@te/testkit';
import plugin from '../src/index.js';
import { createEndpoint } from './helpers.js';

/** The names of this process's threads that start with te-shm, sorted (other test files' transports included). */
function shmThreads(): string[] {
  return readdirSync('/proc/self/task')
    .map((t) => {
      try {
        return readFileSync(`/proc/self/task/${t}/comm`, 'utf8').trim();
      } catch {
        return ''; // the thread exited
      }
    })
    .filter((name) => name.startsWith('te-shm'))
    .sort();
}

test('a transport runs te-shm-copy0..N-1, te-shm-server and te-shm-client, and closing ends them', async () => {
  const before = shmThreads();
  const e = await createEndpoint('thread-names', { copyThreads: 3 });
  const expected = [...before, 'te-shm-client', 'te-shm-copy0', 'te-shm-copy1', 'te-shm-copy2', 'te-shm-server'].sort();
  // Each thread names itself when it starts running.
  const until = Date.now() + 2000;
  while (shmThreads().length < expected.length && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
  try {
    assert.equal(shmThreads(), expected);
  } finally {
    await e.transport.close();
  }
  assert.equal(shmThreads(), before, 'closing joined every thread');
});

/** Scheduling policy (stat field 41: 0 SCHED_OTHER, 3 SCHED_BATCH) of each of this process's te-shm threads. */
function shmPolicies(): number[] {
  const policies: number[] = [];
  for (const t of readdirSync('/proc/self/task')) {
    try {
      if (!readFileSync(`/proc/self/task/${t}/comm`, 'utf8').startsWith('te-shm')) continue;
      policies.push(policyOfStat(readFileSync(`/proc/self/task/${t}/stat`, 'utf8')) ?? -1);
    } catch {
      // the thread exited
    }
  }
  return policies;
}

// Woken by a request or an answer, a thread under SCHED_BATCH does not take the JS thread's
// CPU at once (te/thread_policy.h); describe() reports what the kernel says.
test('every te-shm thread runs under SCHED_BATCH by default, under the default policy with batchScheduling off', async () => {
  assert.equal(shmThreads(), [], "no other shm transport in this process: every te-shm thread is this test's");
  for (const [options, policy, reported] of [
    [{}, 3, 'SCHED_BATCH'],
    [{ batchScheduling: false }, 0, 'SCHED_OTHER'],
  ] as const) {
    const e = await createEndpoint('thread-policy', { copyThreads: 2, ...options });
    try {
      const until = Date.now() + 2000;
      while (shmThreads().length < 4 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      assert.equal(shmPolicies(), [policy, policy, policy, policy], `client, server and 2 copy threads: ${JSON.stringify(options)}`);
      assert.is(e.transport.describe?.().threadPolicy, reported);
    } finally {
      await e.transport.close();
    }
  }
});

test('batchScheduling that is not a boolean is refused with INVALID_CONFIG, from config or environment', () => {
  assertOptionRefused(
    plugin,
    [
      [{}, { TE_SHM_BATCH_SCHEDULING: 'maybe' }],
      [{ batchScheduling: 'yes' }, {}],
    ],
    /batchScheduling|TE_SHM_BATCH_SCHEDULING/,
  );
  assert.is(parseOptions(plugin.options, {}, { TE_SHM_BATCH_SCHEDULING: '0' }, plugin.name).batchScheduling, false);
});

test.run();
