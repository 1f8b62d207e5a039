import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ParallelLayout, TeConfigInput } from '@te/connector';
import type { PDTimeouts } from '../src/index.js';
import { compileWorkerScript } from '@te/testkit';
import type { ModelSpec, PageSide } from './fixtures/pd-model.js';
import type { StagingOptions } from '../src/index.js';

const RANK_SCRIPT = fileURLToPath(new URL('./fixtures/pd-rank.ts', import.meta.url));
const EC_SCRIPT = fileURLToPath(new URL('./fixtures/ec-rank.ts', import.meta.url));

// Ports outside the ephemeral range: a port-0 number passed to a rank could be taken by
// another test process's connection before the rank binds it.
export { freePort } from '@te/testkit';

export interface RankProcess {
  segment: string;
  child: ChildProcess;
  call<T = any>(op: string, args?: unknown, timeoutMs?: number): Promise<T>;
  /** Resolves on the next event of that name from the worker. */
  event(name: string, timeoutMs?: number): Promise<any>;
  kill(signal?: NodeJS.Signals): void;
  close(): Promise<void>;
}

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
export function spawnEC(spec: ECSpec): Promise<RankProcess> {
  return spawnWorker(EC_SCRIPT, { ...process.env, ...spec.env, TE_EC_SPEC: JSON.stringify({ ...spec, config: spec.config ?? TCP_CONFIG }) }, `EC ${spec.role}`);
}

/** Starts one rank in its own process; resolves when its KV manager is up. */
export function spawnRank(spec: RankSpec): Promise<RankProcess> {
  return spawnWorker(
    RANK_SCRIPT,
    { ...process.env, ...spec.env, TE_PD_SPEC: JSON.stringify({ ...spec, config: spec.config ?? TCP_CONFIG }) },
    `${spec.role} rank`,
  );
}

async function spawnWorker(script: string, env: NodeJS.ProcessEnv, what: string): Promise<RankProcess> {
  const spec = { role: what };
  const child = fork(await compileWorkerScript(script), [], {
    env,
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let next = 1;
  const pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  const waiters: { name: string; resolve: (v: any) => void }[] = [];
  let exited = false;
  child.on('message', (m: any) => {
    if (m.id !== undefined) {
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (m.ok) p?.resolve(m.value);
      else p?.reject(new Error(m.error));
      return;
    }
    const i = waiters.findIndex((w) => w.name === m.event);
    if (i >= 0) waiters.splice(i, 1)[0]!.resolve(m);
  });
  child.on('error', () => undefined);
  child.on('exit', (code, signal) => {
    exited = true;
    for (const p of pending.values()) p.reject(new Error(`rank process exited (${signal ?? code})`));
    pending.clear();
  });
  const event = (name: string, timeoutMs = 30_000): Promise<any> =>
    new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no "${name}" event from the ${spec.role} within ${timeoutMs} ms`)), timeoutMs);
      waiters.push({ name, resolve: (v) => (clearTimeout(t), resolve(v)) });
    });
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null): void => reject(new Error(`${spec.role} exited before it was ready (${code})`));
    child.once('exit', onExit);
    const readyOrFail = (m: any): void => {
      if (m.event === 'startFailed') {
        child.off('exit', onExit);
        child.kill('SIGKILL');
        reject(Object.assign(new Error(m.message), { code: m.code }));
      } else if (m.event === 'ready') {
        child.off('exit', onExit);
        child.off('message', readyOrFail);
        resolve({
          segment: m.segment,
          child,
          event,
          call: (op, args, timeoutMs = 60_000) =>
            new Promise((res, rej) => {
              if (exited) return rej(new Error('rank process has exited'));
              const id = next++;
              const t = setTimeout(() => {
                pending.delete(id);
                rej(new Error(`${spec.role}: "${op}" did not answer within ${timeoutMs} ms`));
              }, timeoutMs);
              pending.set(id, { resolve: (v) => (clearTimeout(t), res(v)), reject: (e) => (clearTimeout(t), rej(e)) });
              child.send({ id, op, args });
            }),
          kill: (signal = 'SIGKILL') => {
            if (!exited) child.kill(signal);
          },
          close: async () => {
            if (exited) return;
            const gone = new Promise<void>((r) => child.once('exit', () => r()));
            child.send({ id: 0, op: 'close', args: {} }, () => undefined);
            const t = setTimeout(() => child.kill('SIGKILL'), 5_000);
            await gone;
            clearTimeout(t);
          },
        });
      }
    };
    child.on('message', readyOrFail);
  });
}

/** A room's request as the workers take it (bigints as strings over IPC). */
export function roomArgs(room: bigint, pages: number[], auxSlot: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { room: room.toString(), pages, auxSlot, ...extra };
}

export async function closeAll(ranks: (RankProcess | undefined)[]): Promise<void> {
  await Promise.all(ranks.map((r) => r?.close().catch(() => r.kill())));
}
