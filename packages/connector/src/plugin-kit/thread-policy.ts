import { readdirSync } from 'node:fs';
import { readText, type ReadText } from './usable-cpus.js';

/** Linux scheduling policies by number (sched.h), as `/proc/<pid>/task/<tid>/stat` gives them. */
const POLICY_NAMES: Record<number, string> = { 0: 'SCHED_OTHER', 1: 'SCHED_FIFO', 2: 'SCHED_RR', 3: 'SCHED_BATCH', 5: 'SCHED_IDLE', 6: 'SCHED_DEADLINE' };

/** The policy field of a task's stat line (field 41, counted after the parenthesised name). */
export function policyOfStat(stat: string): number | undefined {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const policy = Number(fields[41 - 3]);
  return Number.isInteger(policy) ? policy : undefined;
}

/**
 * The scheduling policy this process's threads named `prefix…` run under, as a transport
 * reports it (`describe()`): what the kernel says, not what was asked for. "SCHED_BATCH",
 * a mix with counts ("SCHED_BATCH × 2, SCHED_OTHER × 1"), or "no such thread".
 */
export function threadPolicyOf(prefix: string, read: ReadText = readText, tasks = (): string[] => readdirSync('/proc/self/task')): string {
  const counts = new Map<string, number>();
  let ids: string[];
  try {
    ids = tasks();
  } catch {
    return 'unknown (no /proc)';
  }
  for (const tid of ids) {
    if (!read(`/proc/self/task/${tid}/comm`)?.startsWith(prefix)) continue;
    const stat = read(`/proc/self/task/${tid}/stat`);
    const policy = stat === undefined ? undefined : policyOfStat(stat);
    const name = policy === undefined ? 'unknown' : (POLICY_NAMES[policy] ?? `policy ${policy}`);
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  if (counts.size === 0) return 'no such thread';
  if (counts.size === 1) return [...counts.keys()][0]!;
  return [...counts].map(([name, n]) => `${name} × ${n}`).join(', ');
}
