// The processes of one process group, read from /proc: what a test process left running
// when it ended (its workers, a peer it spawned), so the runner can name and end them.
import { readdirSync, readFileSync } from 'node:fs';

/** The live members of process group `pgid`, each with its command line; [] where /proc cannot be read. */
export function groupMembers(pgid) {
  let pids;
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return [];
  }
  const members = [];
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // The command name (field 2) may hold spaces and parentheses: the fields after it
      // start past its last ')'. They are: state, ppid, pgrp, ...
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // A zombie is dead already; it only waits for its parent to collect it.
      if (Number(pgrp) !== pgid || state === 'Z') continue;
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      // No command line: the process is exiting and its memory is gone already.
      if (!cmdline) continue;
      members.push({ pid: Number(pid), cmdline });
    } catch {
      // The process ended while it was being read.
    }
  }
  return members;
}

/** Sends `signal` to every process of group `pgid`; false when none is left. */
export function signalGroup(pgid, signal) {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}
