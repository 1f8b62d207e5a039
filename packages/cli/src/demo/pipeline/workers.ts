// The demo's worker processes: starting one and waiting for it to say it is ready, and
// stopping all of them, whether they got ready or not.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TransferError } from '@te/connector';
import { errorFromChild } from '../../child-error.js';
import { exitOf } from '../../child-exit.js';
import type { WorkerReady, WorkerSpec } from './worker.js';

export interface Worker {
  child: ChildProcess;
  port: number;
  bootstrapPort?: number;
}

/** The worker processes forked so far, for `stopWorkers` to end every one. */
export interface RunningWorkers {
  /** Every worker process forked, ready or not. */
  children: ChildProcess[];
  /** Those that said they were ready: they close their engine when asked to stop. */
  ready: Set<ChildProcess>;
}

/**
 * Starts one worker and records its process in `running` at once, so that a sibling's failed
 * start stops it too (a worker left running keeps this process alive for good).
 */
export function spawnWorker(spec: WorkerSpec, running: RunningWorkers): Promise<Worker> {
  const script = fileURLToPath(new URL('./demo-worker.js', import.meta.url));
  const child = fork(script, [], { env: { ...process.env, TE_DEMO_WORKER: JSON.stringify(spec) }, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  running.children.push(child);
  return awaitReady(child, spec.role, running);
}

/** The worker's first message: ready (resolves) or failed (rejects); an exit before it rejects. */
export function awaitReady(child: ChildProcess, role: WorkerSpec['role'], running: RunningWorkers): Promise<Worker> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void =>
      reject(new TransferError('INTERNAL', `the ${role} worker exited (${signal ?? code}) before it was ready`));
    child.once('exit', onExit);
    child.once('message', (m: WorkerReady) => {
      if (!m.ready) return reject(errorFromChild(`the ${role} worker failed to start`, m.error));
      // Only this listener: `stopWorkers` may already wait for this exit (a sibling failed
      // first, and this ready message was on its way when it was killed).
      child.off('exit', onExit);
      running.ready.add(child);
      resolve({ child, port: m.port!, ...(m.bootstrapPort !== undefined ? { bootstrapPort: m.bootstrapPort } : {}) });
    });
  });
}

/**
 * Ends every worker: those that were ready close their engine when asked (killed after 5 s if
 * they do not), the others are killed. Resolves once every process has exited.
 */
export async function stopWorkers(running: RunningWorkers): Promise<void> {
  await Promise.all(
    running.children.map((child) => {
      if (!running.ready.has(child)) child.kill('SIGKILL');
      else if (child.connected) child.send({ op: 'stop' }, () => undefined);
      return exitOf(child, 5_000);
    }),
  );
}
