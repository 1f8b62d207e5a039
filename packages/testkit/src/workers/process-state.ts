import { readdirSync, readFileSync } from 'node:fs';

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
