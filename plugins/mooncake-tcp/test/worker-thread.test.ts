// Transports inside a worker thread: completions reach the worker's own event loop, a worker
// that exits with transports still open tears them down without taking the process with it
// (Node aborts a worker whose loop still has handles open at its end), and an exception thrown
// by a listener called from native code is the worker's uncaught exception.
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { compileWorkerScript } from '@te/testkit';

interface Outcome {
  messages: { done: boolean; landed: boolean }[];
  error?: Error;
  exitCode: number;
}

async function runWorker(mode: 'close' | 'leave' | 'busy' | 'throw', terminateAfterMs?: number): Promise<Outcome> {
  const script = await compileWorkerScript(fileURLToPath(new URL('./fixtures/bridge-worker.ts', import.meta.url)));
  const worker = new Worker(script, { workerData: { mode } });
  const outcome: Outcome = { messages: [], exitCode: -1 };
  worker.on('message', (m: { done: boolean; landed: boolean }) => {
    outcome.messages.push(m);
    if (terminateAfterMs !== undefined) setTimeout(() => void worker.terminate(), terminateAfterMs);
  });
  worker.on('error', (e) => (outcome.error = e));
  outcome.exitCode = await new Promise<number>((resolve) => worker.on('exit', resolve));
  return outcome;
}

test('a worker thread writes through its own transports, closes them and exits cleanly', async () => {
  const o = await runWorker('close');
  assert.is(o.error, undefined, `no error, got ${o.error?.stack}`);
  assert.equal(o.messages, [{ done: true, landed: true }], 'the bytes landed');
  assert.is(o.exitCode, 0);
});

test('a worker thread that ends with its transports open is torn down cleanly, twice in a row', async () => {
  for (let i = 0; i < 2; i++) {
    const o = await runWorker('leave');
    assert.is(o.error, undefined, `no error, got ${o.error?.stack}`);
    assert.equal(o.messages, [{ done: true, landed: true }], 'the bytes landed');
    assert.is(o.exitCode, 0);
  }
});

test('a worker thread terminated while its writes are in flight ends, and the process goes on', async () => {
  for (const after of [0, 2, 20]) {
    const o = await runWorker('busy', after);
    assert.is(o.error, undefined, `no error, got ${o.error?.stack}`);
    assert.equal(o.messages, [{ done: true, landed: true }], 'the first write landed');
    assert.is(o.exitCode, 1, 'terminated');
  }
});

test("a notification listener that throws is the worker's uncaught exception", async () => {
  const o = await runWorker('throw');
  assert.ok(o.error, 'the worker reported an error');
  assert.match(o.error!.message, /listener failed on purpose/);
  assert.is(o.exitCode, 1);
});

test.run();
