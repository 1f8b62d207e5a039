import { EventEmitter } from 'node:events';
import type { ChildProcess } from 'node:child_process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { awaitReady, stopWorkers, type RunningWorkers } from '../src/demo/pipeline/workers.js';

/**
 * A stand-in for a forked worker (no process): it records the signals and messages sent to
 * it, and the test emits its 'message' and 'exit' in the order a real one can.
 */
class FakeWorkerProcess extends EventEmitter {
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  connected = true;
  readonly signals: string[] = [];
  readonly sent: unknown[] = [];
  kill(signal: NodeJS.Signals): boolean {
    this.signals.push(signal);
    return true;
  }
  send(message: unknown, callback?: () => void): boolean {
    this.sent.push(message);
    callback?.();
    return true;
  }
  exit(code: number | null, signal: NodeJS.Signals | null): void {
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
  }
}

const settlesWithin = <T>(p: Promise<T>, ms: number): Promise<'settled' | 'pending'> =>
  Promise.race([p.then(() => 'settled' as const), new Promise<'pending'>((r) => setTimeout(() => r('pending'), ms))]);

test('a worker whose ready message arrives after it was killed (a sibling failed first) still counts as stopped when it exits', async () => {
  const child = new FakeWorkerProcess();
  const running: RunningWorkers = { children: [child as unknown as ChildProcess], ready: new Set() };
  const ready = awaitReady(child as unknown as ChildProcess, 'encoder', running);
  // A sibling failed: the pipeline stops its workers; this one is not ready yet, so it is killed.
  const stopped = stopWorkers(running);
  assert.equal(child.signals, ['SIGKILL']);
  // Its ready message was already on its way, then the kill lands.
  child.emit('message', { ready: true, port: 1234 });
  child.exit(null, 'SIGKILL');
  // Before, the ready handler removed every 'exit' listener, the stop's too: te's event loop
  // then emptied with the stop still pending, and `te demo` ended with exit 0 and no error.
  assert.is(await settlesWithin(stopped, 1_000), 'settled', 'stopWorkers never saw the exit');
  assert.is((await ready).port, 1234);
});

test('a worker that exits before it says anything rejects with its exit, and a ready one is asked to stop', async () => {
  const early = new FakeWorkerProcess();
  const running: RunningWorkers = { children: [early as unknown as ChildProcess], ready: new Set() };
  const failed = awaitReady(early as unknown as ChildProcess, 'decode', running);
  early.exit(1, null);
  await failed.then(
    () => assert.unreachable('resolved'),
    (e: Error & { code?: string }) => {
      assert.is(e.code, 'INTERNAL');
      assert.match(e.message, /the decode worker exited \(1\) before it was ready/);
    },
  );

  const served = new FakeWorkerProcess();
  const both: RunningWorkers = { children: [served as unknown as ChildProcess], ready: new Set() };
  const ready = awaitReady(served as unknown as ChildProcess, 'prefill', both);
  served.emit('message', { ready: true, port: 1, bootstrapPort: 2 });
  assert.equal(await ready.then((w) => [w.port, w.bootstrapPort]), [1, 2]);
  const stopped = stopWorkers(both);
  assert.equal(served.sent, [{ op: 'stop' }]);
  assert.equal(served.signals, []);
  served.exit(0, null);
  assert.is(await settlesWithin(stopped, 1_000), 'settled');
});

test.run();
