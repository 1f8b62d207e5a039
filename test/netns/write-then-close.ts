// The close case shared by the cancel tests of mooncake-tcp and mooncake-rdma: a 2 MiB WRITE
// toward a target behind a slow link (8 Mbit/s, up to 1 s of queue), and the initiator's
// transport closed 300 ms after submit. What the batch settled with, and how much of the
// WRITE had landed at settle and 2 s later (when whatever was on its way has arrived).
import type { Cluster } from './harness/index.js';

const MiB = 1024 * 1024;
export const CLOSE_WRITE_BYTES = 2 * MiB;

export interface CloseOutcome {
  r: { code: string; message?: string; remoteMayBeWritten?: boolean };
  atSettle: number;
  later: number;
}

/** `env(host)`: the environment of the endpoint fixture on `host` (its buffer: CLOSE_WRITE_BYTES). */
export async function writeThenClose(c: Cluster, fixture: string, env: (host: string) => Record<string, string>): Promise<CloseOutcome> {
  c.rateLimit('target', { mbit: 8, queueMs: 1000 });
  const target = await c.spawn('target', fixture, { env: env('target') });
  const initiator = await c.spawn('initiator', fixture, { env: env('initiator') });
  await target.call('fill', { value: 0 });
  await initiator.call('fill', { value: 0xa5 }); // no zero byte: what landed is what is not zero
  const r = await initiator.call<CloseOutcome['r']>('writeThenClose', { peer: target.info, length: CLOSE_WRITE_BYTES, afterMs: 300 }, 60_000);
  const atSettle = await target.call<number>('landed');
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const later = await target.call<number>('landed');
  return { r, atSettle, later };
}
