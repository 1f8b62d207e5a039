import { fork, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseOptions, type SegmentDescriptor, type Transport } from '@te/connector';
import { compileWorkerScript } from '@te/testkit';
import plugin from '../src/index.js';
import { descriptorOf, type BenchEndpointInfo } from './descriptor.js';

export { pattern } from './pattern.js';

export { descriptorOf, type BenchEndpointInfo };

export const KiB = 1024;
export const MiB = 1024 * KiB;
export const hash = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

export interface TargetProcess {
  child: ChildProcess;
  info: BenchEndpointInfo;
  descriptor: SegmentDescriptor;
  call<T = unknown>(cmd: string, args?: Record<string, unknown>): Promise<T>;
  /**
   * Keeps the target's JS thread busy until `release()` (at most `maxMs`): `started` once the
   * busy loop began, `done` once it ended. Tests wait for these events, not for durations.
   */
  block(maxMs?: number): { started: Promise<void>; release(): void; done: Promise<unknown> };
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * `nofile`: run the target with this RLIMIT_NOFILE (soft and hard), through prlimit(1).
 * `tight`: the target starts its transport with no descriptor to spare (fixtures/target.ts).
 */
export async function spawnTarget(
  size: number,
  options: Record<string, unknown> = {},
  name?: string,
  limits: { nofile?: number; tight?: boolean } = {},
): Promise<TargetProcess> {
  const script = await compileWorkerScript(fileURLToPath(new URL('./fixtures/target.ts', import.meta.url)));
  const child = limits.nofile
    ? fork(script, [], {
        execPath: 'prlimit',
        execArgv: [`--nofile=${limits.nofile}:${limits.nofile}`, process.execPath],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      })
    : fork(script, [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let next = 1;
  const waiting = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  const blocking = new Map<number, () => void>();
  child.on('message', (m: { id: number; blocking?: number; result?: unknown; error?: { message: string; code?: string } }) => {
    if (m.blocking !== undefined) {
      blocking.get(m.blocking)?.();
      blocking.delete(m.blocking);
      return;
    }
    const w = waiting.get(m.id);
    if (!w) return;
    waiting.delete(m.id);
    if (m.error) w.reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
    else w.resolve(m.result);
  });
  child.on('exit', () => {
    for (const w of waiting.values()) w.reject(new Error('target exited'));
    waiting.clear();
  });
  const call = <T>(cmd: string, args: Record<string, unknown> = {}) =>
    new Promise<T>((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      child.send({ id, cmd, ...args });
    });
  const info = await call<BenchEndpointInfo>('start', { size, options, name, tight: limits.tight });
  const block = (maxMs = 60_000) => {
    const dir = mkdtempSync(join(tmpdir(), 'te-block-'));
    const releaseFile = join(dir, 'release');
    const started = new Promise<void>((resolve) => blocking.set(next, resolve));
    const done = call('block', { ms: maxMs, releaseFile }).finally(() => rmSync(dir, { recursive: true, force: true }));
    return { started, release: () => writeFileSync(releaseFile, ''), done };
  };
  return {
    child,
    info,
    descriptor: descriptorOf(info),
    call,
    block,
    kill: (signal = 'SIGKILL') =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill(signal);
      }),
  };
}

export interface Local {
  transport: Transport;
  buffer: Uint8Array;
  addr: bigint;
  epoch: bigint;
}

export async function localTransport(
  size: number,
  options: Record<string, unknown> = {},
  name = `initiator-${process.pid}-${randomBytes(3).toString('hex')}`,
): Promise<Local> {
  const epoch = randomBytes(8).readBigUInt64LE() | 1n;
  const transport = await plugin.create(
    { segmentName: name, epoch, bindAddress: '127.0.0.1', connectTimeoutMs: 3000, env: {}, log: () => {} },
    parseOptions(plugin.options, options, {}, plugin.name),
  );
  const buffer = new Uint8Array(size);
  const r = await transport.registerMemory({ buffer, length: BigInt(size), device: 'cpu', remoteAccess: true });
  return { transport, buffer, addr: r.addr, epoch };
}

/** Runs `body` with a local transport (as `localTransport`) and closes it afterwards, whether `body` passed or threw. */
export async function withLocalTransport<T>(size: number, options: Record<string, unknown>, body: (local: Local) => Promise<T>): Promise<T> {
  const local = await localTransport(size, options);
  try {
    return await body(local);
  } finally {
    await local.transport.close();
  }
}

/** A descriptor naming `local`'s own transport with its epoch: opening it is the same-process path. */
export function selfDescriptor(local: Local, like: SegmentDescriptor): SegmentDescriptor {
  return {
    ...like,
    name: 'self',
    epoch: local.epoch,
    transports: { 'mooncake-tcp': { class: 'tcp' as const, memoryKinds: ['cpu' as const], endpoint: local.transport.endpoint() } },
  };
}

export async function rejectsWith(p: Promise<unknown>, code: string | string[]): Promise<Error & { code: string; details?: Record<string, unknown> }> {
  try {
    await p;
  } catch (e) {
    const err = e as Error & { code: string; details?: Record<string, unknown> };
    const codes = Array.isArray(code) ? code : [code];
    if (!codes.includes(err.code)) throw new Error(`expected ${codes.join('|')}, got ${err.code}: ${err.message}`);
    return err;
  }
  throw new Error(`expected a rejection with ${code}, but it resolved`);
}
