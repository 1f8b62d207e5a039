// The transport's threads carry names (top, perf and /proc show whose CPU time is whose):
// the target's copy threads and server loop, the initiator's client loop. Closing joins them.
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
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

test.run();
