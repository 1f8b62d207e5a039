import type { Test } from 'uvu';
import type { Support } from './support.js';

export { Cluster, type Host } from './cluster.js';
export { namespaces, links, sweepDeadRuns } from './names.js';
export type { NodeProcess } from './node.js';
export { freeSubnet, hostRanges, overlaps, parseCidr } from './subnet.js';
export { netemSupport, netnsSupport, tbfSupport, type Support } from './support.js';

/** Registers a test, or, where the machine lacks what it needs, a skipped test naming the reason. */
export function testIf(t: Test, support: Support, name: string, fn: () => Promise<void>): void {
  if (support.ok) t(name, fn);
  else t.skip(`${name} — skipped: ${support.reason}`, () => undefined);
}
