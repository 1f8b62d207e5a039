// `te bench pd`: a room's KV cache moved from a prefill process to a decode process through
// @te/disagg, KV checksums off and on. Each mode has its own pair of processes, both pairs
// alive at once, and their rooms alternate (which mode goes first alternates too), so load
// that drifts during the run weighs on both alike. Every room is verified: the decode's
// destination pages are poisoned before it and compared (sha256) with the prefill's pages
// after it, outside the timed part.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TransferError } from '@te/connector';
import { errorFromChild, type SentError } from '../../child-error.js';
import { exitOf } from '../../child-exit.js';
import { monotonicMs } from './clock.js';
import { HEAD_BYTES, KV_HEADS, PAGE_TOKENS, type PdRankSpec } from './model.js';

export interface PdBenchOptions {
  connector: string;
  modulePath?: string;
  tokens: number;
  layers: number;
  /** Timed rooms per mode (one warm-up room each comes first). */
  rooms: number;
  modes: ('off' | 'on')[];
  /** Test hook: flip one landed byte after the first timed room, so that its check fails. */
  corrupt?: boolean;
}

export interface PdModeResult {
  checksums: 'off' | 'on';
  /** Median over the timed rooms. */
  bytesPerSecond: number;
  roomBytesPerSecond: number[];
  /** CPU time of both processes (every thread) per room, median. */
  cpuMsPerRoom: number;
}

export interface PdBenchResult {
  connector: string;
  tokens: number;
  layers: number;
  bytesPerRoom: number;
  modes: PdModeResult[];
  /** With both modes: median of each round's on / off throughput, and off / on CPU time. */
  checksumRatio: number | null;
  checksumRatios: number[];
  checksumCpuRatio: number | null;
  roomsVerified: number;
  rooms: number;
  failures: string[];
  verified: boolean;
}

interface RankProcess {
  call<T>(op: string, args?: Record<string, unknown>): Promise<T>;
  ready: { bootstrapPort?: number };
  child: ChildProcess;
}

const median = (xs: number[]): number => {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m]! : (v[m - 1]! + v[m]!) / 2;
};

function spawnRank(spec: PdRankSpec): Promise<RankProcess> {
  const script = fileURLToPath(new URL('./pd-rank.js', import.meta.url));
  const child = fork(script, [], { env: { ...process.env, TE_PD_BENCH_RANK: JSON.stringify(spec) }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let next = 1;
  const gone = (why: string): void => {
    for (const p of pending.values()) p.reject(new TransferError('CONNECTION_LOST', `the ${spec.role} process ${why}`));
    pending.clear();
  };
  child.on('exit', (code, signal) => gone(`exited (${signal ?? code})`));
  child.on('message', (m: { id?: number; ok?: boolean; value?: unknown; error?: SentError }) => {
    if (m.id === undefined) return;
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.ok) p?.resolve(m.value);
    else p?.reject(errorFromChild(spec.role, m.error, 'TRANSFER_FAILED'));
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new TransferError('INTERNAL', `the ${spec.role} process exited (${code}) before it was ready`)));
    child.once('message', (m: { ready: boolean; error?: SentError; bootstrapPort?: number }) => {
      if (!m.ready) return reject(errorFromChild(`the ${spec.role} process failed to start`, m.error));
      resolve({
        ready: m,
        child,
        call: <T>(op: string, args: Record<string, unknown> = {}) =>
          new Promise<T>((res, rej) => {
            const id = next++;
            pending.set(id, { resolve: res as (v: unknown) => void, reject: rej });
            child.send({ id, op, args });
          }),
      });
    });
  });
}

/** `count` of the decode's `total` pages, handed out in shuffled runs of 8 as a paged allocator does. */
function destinationPages(total: number, count: number, seed: number): number[] {
  const runs: number[][] = [];
  for (let p = 0; p < total; p += 8) runs.push(Array.from({ length: Math.min(8, total - p) }, (_, i) => p + i));
  let s = seed * 2654435761;
  for (let i = runs.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % (i + 1);
    [runs[i], runs[j]] = [runs[j]!, runs[i]!];
  }
  return runs.flat().slice(0, count);
}

interface Pair {
  mode: 'off' | 'on';
  prefill: RankProcess;
  decode: RankProcess;
}

async function openPair(o: PdBenchOptions, mode: 'off' | 'on', pages: number): Promise<Pair> {
  const base = { connector: o.connector, ...(o.modulePath ? { modulePath: o.modulePath } : {}), layers: o.layers, checksums: mode === 'on' };
  const prefill = await spawnRank({ ...base, role: 'prefill', pages });
  try {
    // The decode holds a quarter more pages than a room needs, so rooms land on scattered pages.
    const decode = await spawnRank({ ...base, role: 'decode', pages: pages + Math.ceil(pages / 4), bootstrapPort: prefill.ready.bootstrapPort! });
    return { mode, prefill, decode };
  } catch (e) {
    prefill.child.kill('SIGKILL');
    throw e;
  }
}

/**
 * Closes both ranks; one that does not answer within 10 s is killed, and so is one that
 * answered but has not exited 5 s later (te cannot end while a rank runs).
 */
async function closePair(p: Pair): Promise<void> {
  for (const r of [p.decode, p.prefill]) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('close timed out')), 10_000)));
    await Promise.race([r.call('close'), late])
      .catch(() => r.child.kill('SIGKILL'))
      .finally(() => clearTimeout(timer));
    await exitOf(r.child, 5_000);
  }
}

/**
 * KV memory the bench's processes hold at once: per mode, the prefill's pages and the
 * decode's (a quarter more, see openPair); both modes' pairs are alive together.
 */
export function pdBenchMemoryBytes(o: Pick<PdBenchOptions, 'tokens' | 'layers' | 'modes'>): number {
  const pages = Math.ceil(o.tokens / PAGE_TOKENS);
  const perPage = 2 * o.layers * PAGE_TOKENS * KV_HEADS * HEAD_BYTES;
  return o.modes.length * (pages + pages + Math.ceil(pages / 4)) * perPage;
}

export async function runPdBench(o: PdBenchOptions): Promise<PdBenchResult> {
  const pages = Math.ceil(o.tokens / PAGE_TOKENS);
  const item = PAGE_TOKENS * KV_HEADS * HEAD_BYTES;
  const bytesPerRoom = 2 * o.layers * pages * item;
  const pairs: Pair[] = [];
  const failures: string[] = [];
  let roomsVerified = 0;
  let rooms = 0;
  const timed = new Map<'off' | 'on', { bps: number; cpuMs: number }[]>(o.modes.map((m) => [m, []]));
  try {
    for (const mode of o.modes) pairs.push(await openPair(o, mode, pages));
    const src = Array.from({ length: pages }, (_, i) => i);
    for (let k = 0; k <= o.rooms; k++) {
      const order = k % 2 ? [...pairs].reverse() : pairs;
      for (const p of order) {
        const room = String(2 * k + (p.mode === 'on' ? 1 : 0) + 1);
        const dst = destinationPages(pages + Math.ceil(pages / 4), pages, k + 7);
        await p.decode.call('poison', { pages: dst, byte: 0xa5 ^ k });
        await p.decode.call('receive', { room, pages: dst });
        const cpu = async (): Promise<number> => (await p.prefill.call<number>('cpu')) + (await p.decode.call<number>('cpu'));
        const c0 = await cpu();
        const t0 = monotonicMs();
        const sent = p.prefill.call('send', { room, pages: src });
        sent.catch(() => undefined); // its failure is reported below, after the decode's
        const t1 = await p.decode.call<number>('wait', { room });
        await sent;
        const cpuMs = ((await cpu()) - c0) / 1000;
        if (o.corrupt && k === 1 && p === pairs[0]) await p.decode.call('corrupt', { page: dst[0] });
        rooms++;
        const [want, got] = await Promise.all([p.prefill.call<string>('digest', { pages: src }), p.decode.call<string>('digest', { pages: dst })]);
        if (want === got) roomsVerified++;
        else
          failures.push(
            `room ${room} (checksums ${p.mode}): the decode's pages differ from the prefill's (sha256 ${got.slice(0, 12)}… vs ${want.slice(0, 12)}…)`,
          );
        // A room that did not take positive time was timed on two clocks; never report it as a rate.
        if (!(t1 > t0)) throw new Error(`room ${room}: its end (${t1} ms) is not after its start (${t0} ms) on the monotonic clock`);
        if (k > 0) timed.get(p.mode)!.push({ bps: bytesPerRoom / ((t1 - t0) / 1000), cpuMs });
      }
    }
  } finally {
    await Promise.all(pairs.map(closePair));
  }
  const modes: PdModeResult[] = o.modes.map((m) => {
    const t = timed.get(m)!;
    return { checksums: m, bytesPerSecond: median(t.map((x) => x.bps)), roomBytesPerSecond: t.map((x) => x.bps), cpuMsPerRoom: median(t.map((x) => x.cpuMs)) };
  });
  const off = timed.get('off');
  const on = timed.get('on');
  const checksumRatios = off && on ? on.map((x, i) => x.bps / off[i]!.bps) : [];
  return {
    connector: o.connector,
    tokens: o.tokens,
    layers: o.layers,
    bytesPerRoom,
    modes,
    checksumRatio: checksumRatios.length ? median(checksumRatios) : null,
    checksumRatios,
    checksumCpuRatio: off && on ? median(off.map((x) => x.cpuMs)) / median(on.map((x) => x.cpuMs)) : null,
    roomsVerified,
    rooms,
    failures,
    verified: failures.length === 0 && rooms > 0 && roomsVerified === rooms,
  };
}
