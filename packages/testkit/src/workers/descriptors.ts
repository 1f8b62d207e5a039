// For tests of a process out of file descriptors (EMFILE): the descriptors it holds to get
// there, and the CPU it burns meanwhile (a server that retries accept at once spins).
import { closeSync, openSync, readFileSync } from 'node:fs';

/** Descriptors this process holds so that it has none left; freed on release. */
export class DescriptorHoard {
  readonly #held: number[] = [];

  /** Opens descriptors until the process has none left; returns how many it opened. */
  exhaust(): number {
    for (let opened = 0; ; opened++) {
      try {
        this.#held.push(openSync('/dev/null', 'r'));
      } catch {
        return opened;
      }
    }
  }

  /** Frees one held descriptor; false when none is held. */
  releaseOne(): boolean {
    const fd = this.#held.pop();
    if (fd === undefined) return false;
    closeSync(fd);
    return true;
  }

  releaseAll(): void {
    while (this.releaseOne());
  }
}

/** CPU seconds (user + system, all threads) process `pid` used so far. Linux /proc. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime (fields 14, 15) in clock ticks
}
