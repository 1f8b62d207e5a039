import { ip } from './ip.js';

/*
 * A /24 for the test network that overlaps nothing the host has: no address and no route
 * (any table) of the host may fall inside it, or traffic meant for a namespace could leave
 * the machine, or the host's own traffic be captured. Candidates come from 10.250.0.0/16,
 * then the benchmarking range 198.18.0.0/15 (RFC 2544); the starting point depends on the
 * pid, so concurrent runs rarely try the same one first (each sees the others' bridge
 * addresses and routes and skips them).
 */
export type Cidr = { base: number; len: number };

export function parseCidr(text: string): Cidr | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)(?:\/(\d+))?$/.exec(text);
  if (!m) return undefined;
  const base = m.slice(1, 5).reduce((a, o) => a * 256 + Number(o), 0);
  return { base, len: m[5] === undefined ? 32 : Number(m[5]) };
}

const mask = (len: number): number => (len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0);
export const overlaps = (a: Cidr, b: Cidr): boolean => {
  const len = Math.min(a.len, b.len);
  return (a.base & mask(len)) >>> 0 === (b.base & mask(len)) >>> 0;
};

/** What the host uses: its addresses (with their prefixes) and its routes, default routes excepted. */
export function hostRanges(): Cidr[] {
  const out: Cidr[] = [];
  for (const line of ip('-4', '-o', 'addr', 'show').split('\n')) {
    const m = /\binet (\S+)/.exec(line);
    const c = m && parseCidr(m[1]!);
    if (c) out.push(c);
  }
  for (const line of ip('-4', 'route', 'show', 'table', 'all').split('\n')) {
    // "10.1.0.0/16 via …", "local 127.0.0.1 dev lo table local …", "broadcast …", "default via …"
    const words = line.trim().split(/\s+/);
    const dest = /^(unicast|local|broadcast|multicast|unreachable|blackhole|prohibit|throw|anycast|nat)$/.test(words[0] ?? '') ? words[1] : words[0];
    const c = dest && parseCidr(dest);
    if (c && c.len > 0) out.push(c);
  }
  return out;
}

/** The first three octets of a free /24, e.g. "10.250.17". */
export function freeSubnet(used: Cidr[] = hostRanges()): string {
  const pools = [
    [10, 250],
    [198, 18],
    [198, 19],
  ] as const;
  for (const [a, b] of pools) {
    for (let i = 0; i < 256; i++) {
      const c = (process.pid + i) % 256;
      const candidate = { base: ((a * 256 + b) * 256 + c) * 256, len: 24 };
      if (!used.some((u) => overlaps(u, candidate))) return `${a}.${b}.${c}`;
    }
  }
  throw new Error('no free /24 in 10.250.0.0/16 or 198.18.0.0/15 for the test network');
}
