import type { ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';

/** Whether process `pid` still runs (a zombie waiting to be reaped has exited). Linux /proc. */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/**
 * What a process that should have exited is doing, for a failure message: each thread's
 * id, name, state and kernel wait ("1234 node-MainThread S futex_do_wait; ..."), or "gone".
 */
export function describeThreads(pid: number): string {
  const read = (f: string): string => {
    try {
      return readFileSync(f, 'utf8').trim();
    } catch {
      return '?';
    }
  };
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return 'gone';
  }
  return tids
    .map((t) => {
      const stat = read(`/proc/${pid}/task/${t}/stat`);
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      return `${t} ${read(`/proc/${pid}/task/${t}/comm`)} ${state} ${read(`/proc/${pid}/task/${t}/wchan`)}`;
    })
    .join('; ');
}

/**
 * Sends SIGSTOP to `pid` and resolves once every one of its threads is stopped (state T in
 * /proc). kill() returns before that: the stop begins only when one of the target's threads
 * runs to take the signal, and a thread busy in a system call stops when it returns. On a
 * loaded machine a peer "stopped" without this wait can still answer for milliseconds,
 * enough to finish a 32 MiB batch that a test expects to time out. Where /proc is missing
 * it waits a fixed 50 ms.
 */
export async function stopProcess(pid: number, timeoutMs = 5_000): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  if (!existsSync('/proc/self')) return new Promise((r) => setTimeout(r, 50));
  const end = Date.now() + timeoutMs;
  for (;;) {
    const states = threadStates(pid);
    if (states === undefined) throw new Error(`process ${pid} is gone before it stopped`);
    // null: a thread exited between the listing and the read; look again.
    if (states !== null && states.every((st) => st === 'T' || st === 't')) return;
    if (Date.now() > end) throw new Error(`process ${pid} did not stop within ${timeoutMs} ms (thread states ${states?.join('') ?? '?'})`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Each thread's state letter from /proc; undefined when the process is gone, null when a thread vanished meanwhile. */
function threadStates(pid: number): string[] | null | undefined {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return undefined;
  }
  try {
    return tids.map((t) => {
      const stat = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    });
  } catch {
    return existsSync(`/proc/${pid}`) ? null : undefined;
  }
}

/** Waits up to `ms` for `child` to exit, and kills it (SIGKILL) if it has not: whether it exited on its own. */
export function exitsWithin(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve(false);
    }, ms);
    timer.unref();
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * Waits up to `ms` for every process of `pids` to end. Those still running are described
 * ("pid (threads)", see describeThreads), killed, and returned; none left is [].
 */
export async function survivors(pids: number[], ms: number): Promise<string[]> {
  const until = Date.now() + ms;
  while (pids.some(isRunning) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  const left = pids.filter(isRunning);
  const described = left.map((pid) => `${pid} (${describeThreads(pid)})`);
  for (const pid of left) process.kill(pid, 'SIGKILL');
  return described;
}
