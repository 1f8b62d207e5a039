import { ip, pidAlive, quietly } from './ip.js';

/*
 * Every namespace and host-side link a run creates is named te-<pid>-<n> (bridges
 * te-<pid>-b<n>), so a later run can tell leftovers of a dead run (its pid is gone: it was
 * killed before its exit handler ran) from those of a run still going, and remove them.
 */
const NAME = /^te-(\d+)-b?\d+$/;
let counter = 0;

export function nextName(kind: 'ns' | 'bridge'): string {
  const name = `te-${process.pid}-${kind === 'bridge' ? 'b' : ''}${counter++}`;
  // IFNAMSIZ: interface names have at most 15 characters.
  if (name.length > 15) throw new Error(`interface name ${name} is too long`);
  return name;
}

function deadOwner(name: string): boolean {
  const m = NAME.exec(name);
  return m !== null && Number(m[1]) !== process.pid && !pidAlive(Number(m[1]));
}

export function namespaces(): string[] {
  return ip('netns', 'list')
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter(Boolean);
}

export function links(): string[] {
  // "9: te-123-0@if8: <...>": the name, without the peer suffix.
  return ip('-o', 'link', 'show')
    .split('\n')
    .map((l) => l.split(': ')[1]?.split('@')[0] ?? '')
    .filter(Boolean);
}

/** Kills what still runs inside a namespace (a process keeps a deleted namespace alive). */
export function killInside(ns: string): void {
  let pids: string[] = [];
  try {
    pids = ip('netns', 'pids', ns).split('\n').filter(Boolean);
  } catch {
    return;
  }
  for (const pid of pids) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/** Removes the namespaces, veths and bridges of earlier runs whose process is dead; returns their names. */
export function sweepDeadRuns(): string[] {
  const removed: string[] = [];
  const deadNs = namespaces().filter(deadOwner);
  for (const ns of deadNs) killInside(ns);
  for (const link of links().filter(deadOwner)) {
    quietly('ip', ['link', 'del', link]);
    removed.push(link);
  }
  for (const ns of deadNs) {
    quietly('ip', ['netns', 'del', ns]);
    removed.push(ns);
  }
  return removed;
}
