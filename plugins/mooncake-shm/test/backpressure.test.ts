import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/*
 * A hostile same-user initiator floods requests (and notifications) the target refuses at
 * once, and never reads its socket. Every one of them is answered with a completion: without
 * back-pressure the target queued them all (16 B per 48 B received, forever). The hostile
 * client must pass a control page (SCM_RIGHTS) on a SOCK_SEQPACKET socket and hold the HELLO
 * nonce in memory the target reads, which Node cannot do: it is a small C++ program linked
 * against the core (test/native/shm_backpressure_test.cpp), built and run by
 * scripts/backpressure-test.sh (which scripts/sanitize.sh also runs, under ThreadSanitizer).
 * It checks the target's own counters (ServerStats).
 */
const root = fileURLToPath(new URL('..', import.meta.url));

test('a peer flooding refused requests and never reading is held back; its queue stays bounded and other peers are served', () => {
  const r = spawnSync('sh', [`${root}scripts/backpressure-test.sh`], { encoding: 'utf8', timeout: 420_000 });
  process.stdout.write(r.stdout);
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
});

test('an unknown mode is refused with the usage line and status 2, before anything is built', () => {
  const r = spawnSync('sh', [`${root}scripts/backpressure-test.sh`, '--msan'], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, CXX: 'false' } });
  assert.is(r.status, 2, `${r.stdout}\n${r.stderr}`);
  assert.is(r.stderr.trim(), 'usage: sh scripts/backpressure-test.sh [--tsan|--asan-ubsan]');
});

test.run();
