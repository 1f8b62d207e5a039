import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { policyOfStat, threadPolicyOf } from '../src/plugin-kit/thread-policy.js';

// A /proc task stat line: pid, (name), then fields 3.. ; the policy is field 41.
const stat = (name: string, policy: number): string =>
  `77 (${name}) S ${Array.from({ length: 37 }, (_, i) => i + 4).join(' ')} ${policy} 0 0 0 0 0 0 0 0 0 0 0`;

test('the policy is read after the last parenthesis, so a name with spaces or ")" does not shift it', () => {
  assert.is(policyOfStat(stat('te-tcp-io0', 3)), 3);
  assert.is(policyOfStat(stat('odd) name (x', 0)), 0);
  assert.is(policyOfStat('77 (short) S 1 2'), undefined);
});

test('threadPolicyOf names the policy of the matching threads, counts a mix, and says when there are none', () => {
  const files: Record<string, string> = {
    '/proc/self/task/1/comm': 'node\n',
    '/proc/self/task/1/stat': stat('node', 0),
    '/proc/self/task/2/comm': 'te-tcp-io0\n',
    '/proc/self/task/2/stat': stat('te-tcp-io0', 3),
    '/proc/self/task/3/comm': 'te-tcp-io1\n',
    '/proc/self/task/3/stat': stat('te-tcp-io1', 3),
  };
  const read = (p: string): string | undefined => files[p];
  const tasks = (): string[] => ['1', '2', '3'];
  assert.is(threadPolicyOf('te-tcp-io', read, tasks), 'SCHED_BATCH');
  assert.is(threadPolicyOf('node', read, tasks), 'SCHED_OTHER');
  assert.is(threadPolicyOf('te-shm', read, tasks), 'no such thread');
  files['/proc/self/task/3/stat'] = stat('te-tcp-io1', 0);
  assert.is(threadPolicyOf('te-tcp-io', read, tasks), 'SCHED_BATCH × 1, SCHED_OTHER × 1');
  delete files['/proc/self/task/3/stat']; // exited between its name and its stat
  assert.is(threadPolicyOf('te-tcp-io', read, tasks), 'SCHED_BATCH × 1, unknown × 1');
  assert.is(
    threadPolicyOf('te', read, () => {
      throw new Error('ENOENT');
    }),
    'unknown (no /proc)',
  );
});

// Its name, not a fixed one: Node.js 20 and 22 call the main thread "node", 24 "MainThread",
// 26 "node-MainThread".
test('this very thread, read from the real /proc, runs under the default policy', () => {
  const name = readFileSync(`/proc/self/task/${process.pid}/comm`, 'utf8').trim();
  assert.is(threadPolicyOf(name), 'SCHED_OTHER');
});

test.run();
