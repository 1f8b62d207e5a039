// How much of a buffer the kernel backs with huge pages, read from /proc/self/smaps: what
// the same-host benchmark prints beside its memcpy baseline's own figure, so a reader sees
// that both copied between the same kinds of pages.
import { readFileSync } from 'node:fs';

/** The kB resident and the kB in huge pages of the mappings overlapping [addr, addr + length); undefined when smaps cannot be read. */
export function residentPages(addr, length) {
  let text;
  try {
    text = readFileSync('/proc/self/smaps', 'utf8');
  } catch {
    return undefined;
  }
  const lo = BigInt(addr);
  const hi = lo + BigInt(length);
  let inside = false;
  const out = { residentKb: 0, hugeKb: 0 };
  for (const line of text.split('\n')) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
    if (range) {
      inside = BigInt(`0x${range[1]}`) < hi && BigInt(`0x${range[2]}`) > lo;
      continue;
    }
    const field = inside && /^(\w+):\s+(\d+) kB/.exec(line);
    if (!field) continue;
    if (field[1] === 'Rss') out.residentKb += Number(field[2]);
    if (field[1] === 'AnonHugePages' || field[1] === 'ShmemPmdMapped' || field[1] === 'FilePmdMapped') out.hugeKb += Number(field[2]);
  }
  return out;
}

/** The part of [addr, addr + length) in huge pages (0 to 1; -1 when smaps cannot be read). */
export function hugePageShare(addr, length) {
  const p = residentPages(addr, length);
  if (!p) return -1;
  return p.residentKb ? p.hugeKb / p.residentKb : 0;
}

/** The kernel's transparent-huge-page policy for shared memory (shmem_enabled's selected word), or 'unknown'. */
export function shmemHugePolicy() {
  try {
    return /\[(\w+)\]/.exec(readFileSync('/sys/kernel/mm/transparent_hugepage/shmem_enabled', 'utf8'))?.[1] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** "source 0%, destination 100%": the part of each buffer of a copy in huge pages. */
export function pagesText(p) {
  const pct = (x) => (x < 0 ? 'unknown' : `${Math.round(x * 100)}%`);
  return `source ${pct(p.source)}, destination ${pct(p.destination)}`;
}

/** The same-host report's line on pages: what each side's buffers got, and the kernel's policy. */
export function pagesLine(pages) {
  return `in huge pages (shmem_enabled: ${pages.shmemEnabled}): mooncake-shm ${pagesText(pages.shm)}; memcpy ${pagesText(pages.memcpy)}; registered ${pagesText(pages.shmRegistered)}; memcpy from private memory ${pagesText(pages.memcpyPrivate)}`;
}
