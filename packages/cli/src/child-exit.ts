// Waiting for a worker process of the CLI (a demo worker, a `te bench pd` rank) to end. The
// parent cannot end while a child runs (its handle keeps the event loop alive), and a child
// that was asked to stop can still hang in process.exit() (V8's platform shutdown,
// nodejs/node#54918): so every wait has a deadline, past which the child is killed.
import type { ChildProcess } from 'node:child_process';

/** Resolves once `child` has exited; if it has not within `graceMs`, it is killed (SIGKILL) first. */
export function exitOf(child: ChildProcess, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
