import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { batchOf, createTransferEngine } from '@te/connector';
import { compileWorkerScript, spawnTargetProcess } from '@te/testkit';
import { pattern } from './helpers.js';

/*
 * Two initiators, each its own process, writing to one target. The target holds back a
 * connection's completions while more of that connection's requests are being copied, and
 * sends them together. Holding them while the copy queue had any work, the other
 * initiator's included, stranded a small write's completion for as long as the other kept
 * the queue busy: its batch failed with TIMEOUT although its bytes had landed (60 of 200
 * writes with a 1 s deadline, beside 16 one-MiB writes in flight).
 */
const targetScript = fileURLToPath(new URL('./fixtures/conformance-target.ts', import.meta.url));
const floodScript = fileURLToPath(new URL('./fixtures/flooding-initiator.ts', import.meta.url));
const config = { connector: 'mooncake-shm', timeouts: { transferMs: 10_000, handshakeMs: 5_000 } };
const SMALL = 64 << 10;
const PROBES = 100;

interface Counts {
  completed: number;
  failed: number;
}

/** The flooding initiator's answer to `cmd`; fails when it exits first or does not answer within 30 s. */
function ask(child: ChildProcess, cmd: 'count' | 'stop'): Promise<Counts> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`the flooding initiator did not answer '${cmd}' within 30 s`)), 30_000);
    const onExit = (code: number | null, signal: string | null) =>
      done(new Error(`the flooding initiator exited (code ${code}, signal ${signal}) before answering '${cmd}'`));
    const onMessage = (m: unknown) => done(undefined, m as Counts);
    function done(error?: Error, counts?: Counts) {
      clearTimeout(timer);
      child.off('exit', onExit);
      child.off('message', onMessage);
      if (error) reject(error);
      else resolve(counts!);
    }
    child.once('exit', onExit);
    child.once('message', onMessage);
    if (child.exitCode !== null || child.signalCode !== null) return onExit(child.exitCode, child.signalCode);
    child.send({ cmd }, (e) => e && done(e));
  });
}

test("a small write beside another initiator's stream of large writes completes in time, its bytes landed", async () => {
  const target = await spawnTargetProcess(await compileWorkerScript(targetScript), config);
  const flooder = fork(await compileWorkerScript(floodScript), [], {
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, TE_FLOOD_CONFIG: JSON.stringify(config), TE_FLOOD_SEGMENT: target.segment, TE_FLOOD_REMOTE: String(await target.alloc(16 << 20)) },
  });
  const initiator = await createTransferEngine(config);
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the flooding initiator was not writing within 30 s')), 30_000);
      flooder.once('message', () => resolve(clearTimeout(timer)));
      flooder.once('exit', (code, signal) => reject(new Error(`the flooding initiator exited (code ${code}, signal ${signal})`)));
    });
    const remote = await target.alloc(SMALL);
    const data = new Uint8Array(SMALL);
    const local = await initiator.registerMemory(data);
    const before = await ask(flooder, 'count');
    for (let i = 0; i < PROBES; i++) {
      data.set(pattern(i + 1, SMALL));
      const started = Date.now();
      // A deadline far past a 64 KiB copy, and short enough that a stranded completion fails the test.
      const status = await initiator.transfer(target.segment, batchOf([{ op: 'write', local: local.addr, remote, length: SMALL }]), { timeoutMs: 3_000 }).then(
        () => 'OK',
        (e: { code?: string }) => e.code ?? String(e),
      );
      assert.is(status, 'OK', `write ${i + 1} of ${PROBES} (after ${Date.now() - started} ms)`);
      if (i % 25 === 24) assert.equal(await target.read(remote, SMALL), data, `write ${i + 1}: the bytes landed`);
    }
    const after = await ask(flooder, 'count');
    // The other initiator kept writing the whole time: the case it guards was exercised.
    assert.ok(after.completed - before.completed >= PROBES, `only ${after.completed - before.completed} large writes ran beside the small ones`);
    assert.is(after.failed, 0, 'every large write succeeded');
  } finally {
    await ask(flooder, 'stop').catch(() => flooder.kill('SIGKILL'));
    await initiator.close();
    await target.close();
  }
});

test.run();
