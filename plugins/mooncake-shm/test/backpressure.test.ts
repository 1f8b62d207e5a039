import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/*
 * A hostile same-user initiator floods requests (and notifications) the target refuses at
 * once, and never reads its socket. Every one of them is answered with a completion: without
 * back-pressure the target queued them all (16 B per 48 B received, forever). The hostile
 * client must pass a control page (SCM_RIGHTS) on a SOCK_SEQPACKET socket and hold the HELLO
 * nonce in memory the target reads, which Node cannot do: it is a small C++ program linked
 * against the core (test/native/shm_backpressure_test.cpp), built here with the flags of
 * scripts/native-test.sh and run. It checks the target's own counters (ServerStats).
 */
const root = fileURLToPath(new URL('..', import.meta.url));
const core = fileURLToPath(new URL('../../../native', import.meta.url));

test('a peer flooding refused requests and never reading is held back; its queue stays bounded and other peers are served', () => {
  const out = `${root}build/native-tests/backpressure`;
  mkdirSync(out, { recursive: true });
  const sources = ['wire', 'socket', 'control_page', 'copy', 'server', 'client', 'transport'].map((f) => `${root}native/${f}.cpp`);
  const cc = spawnSync(
    process.env.CXX ?? 'g++',
    ['-std=c++17', '-O1', '-g', '-Wall', '-Wextra', '-Wno-unused-parameter', `-I${root}native`, `-I${core}/include`, `-I${core}/test`, ...sources,
      `${core}/src/status.cpp`, `${core}/src/memory_registry.cpp`, `${root}test/native/shm_backpressure_test.cpp`, '-o', `${out}/shm_backpressure_test`, '-lpthread'],
    { encoding: 'utf8', timeout: 300_000 },
  );
  assert.is(cc.status, 0, cc.stderr);
  const r = spawnSync(`${out}/shm_backpressure_test`, [], { encoding: 'utf8', timeout: 120_000 });
  process.stdout.write(r.stdout);
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
});

test.run();
