import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ParallelLayout, TeConfigInput } from '@te/connector';
import type { PDTimeouts } from '../src/index.js';
import { compileWorkerScript } from '@te/testkit';
import type { ModelSpec, PageSide } from './fixtures/pd-model.js';
import type { StagingOptions } from '../src/index.js';
import type { ECRankOps } from './fixtures/ec-rank.js';
import type { PDRankOps } from './fixtures/pd-rank.js';

const RANK_SCRIPT = fileURLToPath(new URL('./fixtures/pd-rank.ts', import.meta.url));
const EC_SCRIPT = fileURLToPath(new URL('./fixtures/ec-rank.ts', import.meta.url));

// Ports outside the ephemeral range: a port-0 number passed to a rank could be taken by
// another test process's connection before the rank binds it.
export { freePort } from '@te/testkit';

/** The value each op of a worker's table (`PDRankOps`, `ECRankOps`) replies with. */
export type OpReplies<Ops> = { [K in keyof Ops]: Ops[K] extends (...args: never[]) => Promise<infer R> ? R : never };

/** A message from a worker: a call's reply (by `id`: `value` or `error`) or an event (by `event` name, with its fields). */
export interface WorkerMessage {
  id?: number;
  ok?: boolean;
  value?: unknown;
  error?: string;
  event?: string;
  [field: string]: unknown;
}

/** What a worker sends before it serves calls: `ready` with its engine's segment, or `startFailed`. */
type StartReport = { event: 'ready'; segment: string } | { event: 'startFailed'; code: string; message: string };

/** A worker process serving the ops of `Ops` (a PD rank's by default). */
export interface RankProcess<Ops = PDRankOps> {
  segment: string;
  child: ChildProcess;
  call<K extends keyof Ops & string>(op: K, args?: unknown, timeoutMs?: number): Promise<OpReplies<Ops>[K]>;
  /** Resolves on the next event of that name from the worker. */
  event(name: string, timeoutMs?: number): Promise<WorkerMessage>;
  kill(signal?: NodeJS.Signals): void;
  close(): Promise<void>;
}

/** A worker process serving an EC producer's or consumer's ops. */
export type ECProcess = RankProcess<ECRankOps>;

export interface RankSpec {
  role: 'prefill' | 'decode';
  layout: ParallelLayout;
  model: ModelSpec;
  bootstrapPort: number;
  config?: TeConfigInput;
  timeouts?: Partial<PDTimeouts>;
  env?: NodeJS.ProcessEnv;
  layerwise?: boolean;
  /** This rank's page size and layout where they differ from the model's. */
  side?: PageSide;
  staging?: StagingOptions;
}

export function layout(tp: number, tpRank: number, extra: Partial<ParallelLayout> = {}): ParallelLayout {
  return { attnTpSize: tp, attnTpRank: tpRank, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0, ...extra };
}

export const TCP_CONFIG: TeConfigInput = { connector: 'mooncake-tcp', bindAddress: '127.0.0.1' };

export interface ECSpec {
  role: 'producer' | 'consumer';
  config?: TeConfigInput;
  poolBytes?: number;
  destBytes?: number;
  loadTimeoutMs?: number;
  maxPulls?: number;
  env?: NodeJS.ProcessEnv;
}

/** Starts an EC producer or consumer in its own process. */
export function spawnEC(spec: ECSpec): Promise<ECProcess> {
  return spawnWorker(EC_SCRIPT, { ...process.env, ...spec.env, TE_EC_SPEC: JSON.stringify({ ...spec, config: spec.config ?? TCP_CONFIG }) }, `EC ${spec.role}`);
}

/**
 * Starts one rank in its own process; resolves when its KV manager is up. A rank without
 * its own environment runs in a process whose previous rank closed cleanly, where one
 * waits (see `close`): a process start (module loading, compilation) costs more than a
 * scenario's transfers, and a suite starts hundreds of ranks on a small machine. Each rank
 * is still alone in its process while it lives.
 */
export function spawnRank(spec: RankSpec): Promise<RankProcess> {
  const full = { ...spec, config: spec.config ?? TCP_CONFIG };
  if (spec.env === undefined) {
    const child = takeIdle();
    if (child) return attach(child, `${spec.role} rank`, full);
  }
  return spawnWorker(RANK_SCRIPT, { ...process.env, ...spec.env, TE_PD_SPEC: JSON.stringify(full) }, `${spec.role} rank`, spec.env === undefined);
}

// Rank processes whose rank closed cleanly, waiting for the next spec. Like every worker
// they are unreferenced: the test process exits when its tests are done, and they follow
// it (a rank exits when its parent's IPC channel closes).
const idle: ChildProcess[] = [];
const MAX_IDLE = 20;
/** How long a rank may take to start (its KV manager's bootstrap included) on a loaded machine. */
const READY_MS = 90_000;

function takeIdle(): ChildProcess | undefined {
  for (let child = idle.pop(); child; child = idle.pop()) {
    if (child.connected && child.exitCode === null && child.signalCode === null) return child;
  }
  return undefined;
}

function park(child: ChildProcess): void {
  if (idle.length >= MAX_IDLE) {
    child.kill('SIGKILL');
    return;
  }
  idle.push(child);
}

async function spawnWorker<Ops>(script: string, env: NodeJS.ProcessEnv, what: string, recyclable = false): Promise<RankProcess<Ops>> {
  const child = fork(await compileWorkerScript(script), [], {
    env,
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  child.on('error', () => undefined);
  // A worker never holds the test process open: every wait on one has a deadline timer of
  // its own, and a worker a failed test left behind (a sibling of a rank that failed to
  // start) exits when the test process does, as its IPC channel closes.
  child.unref();
  child.channel?.unref();
  return attach(child, what, undefined, recyclable);
}

/** Drives a worker process: its calls, events and close; with `start`, sends it the spec to start from. */
async function attach<Ops>(child: ChildProcess, what: string, start?: object, recyclable = true): Promise<RankProcess<Ops>> {
  const channel = new WorkerChannel(child, what);
  /** Closes the rank; its process then waits for the next rank (`recyclable`) or exits. */
  const close = async (): Promise<void> => {
    if (channel.exited || channel.released) return;
    if (!recyclable) return channel.exit();
    const clean = await channel.call('close', { recycle: true }, 5_000).then(
      () => true,
      () => false,
    );
    if (!clean || channel.exited) return channel.kill();
    channel.release();
    park(child);
  };
  const ready = await waitReady(child, what, start);
  return {
    segment: ready.segment,
    child,
    event: (name, timeoutMs) => channel.event(name, timeoutMs),
    call: (op, args, timeoutMs) => channel.call(op, args, timeoutMs),
    kill: (signal) => channel.kill(signal),
    close,
  };
}

/** Calls to a worker (answered by id) and its events, until it exits or is handed back to the pool. */
class WorkerChannel {
  exited = false;
  released = false;
  private next = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly waiters: { name: string; resolve: (v: WorkerMessage) => void }[] = [];
  private readonly onMessage = (m: WorkerMessage): void => {
    if (m.id !== undefined) {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.ok) p?.resolve(m.value);
      else p?.reject(new Error(m.error));
      return;
    }
    const i = this.waiters.findIndex((w) => w.name === m.event);
    if (i >= 0) this.waiters.splice(i, 1)[0]!.resolve(m);
  };
  private readonly onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
    this.exited = true;
    for (const p of this.pending.values()) p.reject(new Error(`rank process exited (${signal ?? code})`));
    this.pending.clear();
  };

  constructor(
    private readonly child: ChildProcess,
    private readonly what: string,
  ) {
    child.on('message', this.onMessage);
    child.on('exit', this.onExit);
  }

  /** Resolves with the value of the worker's reply, typed by the caller (the reply is not checked). */
  call<T>(op: string, args?: unknown, timeoutMs = 60_000): Promise<T> {
    return new Promise((res, rej) => {
      if (this.exited || this.released) return rej(new Error(`${this.what} has ${this.exited ? 'exited' : 'been closed'}`));
      const id = this.next++;
      const t = setTimeout(() => {
        this.pending.delete(id);
        rej(new Error(`${this.what}: "${op}" did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve: (v) => (clearTimeout(t), res(v as T)), reject: (e) => (clearTimeout(t), rej(e)) });
      this.child.send({ id, op, args });
    });
  }

  event(name: string, timeoutMs = 30_000): Promise<WorkerMessage> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no "${name}" event from the ${this.what} within ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({ name, resolve: (v) => (clearTimeout(t), resolve(v)) });
    });
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (!this.exited) this.child.kill(signal);
  }

  /** Asks the worker to exit; kills it if it has not within 5 s. */
  async exit(): Promise<void> {
    const gone = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.send({ id: 0, op: 'close', args: {} }, () => undefined);
    const t = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
    await gone;
    clearTimeout(t);
  }

  /** Stops listening: the process now belongs to the pool. */
  release(): void {
    this.released = true;
    this.child.off('message', this.onMessage);
    this.child.off('exit', this.onExit);
  }
}

/** Resolves on the worker's `ready` (sending it `start` first, where given); rejects on `startFailed`, exit or the deadline. */
function waitReady(child: ChildProcess, what: string, start?: object): Promise<{ segment: string }> {
  return new Promise((resolve, reject) => {
    const settle = (): void => {
      clearTimeout(deadline);
      child.off('exit', exitEarly);
      child.off('message', readyOrFail);
    };
    // A rank that neither starts nor fails fails the test, rather than hanging it.
    const deadline = setTimeout(() => {
      settle();
      child.kill('SIGKILL');
      reject(new Error(`${what} was not ready within ${READY_MS} ms`));
    }, READY_MS);
    const exitEarly = (code: number | null): void => {
      settle();
      reject(new Error(`${what} exited before it was ready (${code})`));
    };
    const readyOrFail = (m: StartReport): void => {
      if (m.event === 'startFailed') {
        settle();
        child.kill('SIGKILL');
        reject(Object.assign(new Error(m.message), { code: m.code }));
      } else if (m.event === 'ready') {
        settle();
        resolve({ segment: m.segment });
      }
    };
    child.once('exit', exitEarly);
    child.on('message', readyOrFail);
    if (start) child.send({ op: 'start', args: start });
  });
}

/** A room's request as the workers take it (bigints as strings over IPC). */
export function roomArgs(room: bigint, pages: number[], auxSlot: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { room: room.toString(), pages, auxSlot, ...extra };
}

export async function closeAll<Ops>(ranks: (RankProcess<Ops> | undefined)[]): Promise<void> {
  await Promise.all(ranks.map((r) => r?.close().catch(() => r.kill())));
}
