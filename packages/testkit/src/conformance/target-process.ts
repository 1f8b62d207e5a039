import { fork, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { createTransferEngine, loadConfig, type TeConfigInput } from '@te/connector';
import { stopProcess } from '../workers/process-state.js';
import { LocalTargetMemory, type ReceivedNotification, type TargetMemory } from './target.js';

/*
 * A conformance target in a child process, driven over Node's IPC channel, so a real
 * transport is tested across processes. The child runs `serveTargetProcess()`; the parent
 * calls `spawnTargetProcess(script, config)`. Bigints cross as strings.
 */

type Op = 'alloc' | 'read' | 'write' | 'free' | 'notifications' | 'close';
interface OpMessage {
  id: number;
  op: Op;
  args: unknown[];
}
interface ReplyMessage {
  id: number;
  ok: boolean;
  value?: unknown;
  error?: string;
}

/** Runs in the child: creates an engine from `TE_TARGET_CONFIG` (JSON) and serves memory ops. */
export async function serveTargetProcess(): Promise<void> {
  // Through loadConfig, so the environment applies as everywhere else (TE_HANDSHAKE_PORT, MC_*, ...).
  const config = loadConfig({ json: JSON.parse(process.env.TE_TARGET_CONFIG ?? '{}') as Record<string, unknown> });
  const engine = await createTransferEngine(config);
  const memory = new LocalTargetMemory(engine);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each handler takes its own op's arguments, sent over IPC
  const handlers: Record<Op, (...args: any[]) => Promise<unknown>> = {
    // Absent options cross the IPC channel as null.
    alloc: async (length: number, options: { fill?: number; remoteAccess?: boolean } | null) => (await memory.alloc(length, options ?? {})).toString(),
    read: async (addr: string, length: number) => Buffer.from(await memory.read(BigInt(addr), length)).toString('base64'),
    write: async (addr: string, b64: string) => memory.write(BigInt(addr), Buffer.from(b64, 'base64')),
    free: async (addr: string) => memory.free(BigInt(addr)),
    notifications: async () =>
      (await memory.notifications()).map((n) => ({
        from: n.from,
        payload: Buffer.from(n.payload).toString('base64'),
        snapshot: n.snapshot ? Buffer.from(n.snapshot).toString('base64') : undefined,
      })),
    close: async () => {
      await engine.close();
      setImmediate(() => process.exit(0));
    },
  };
  process.on('message', (m: OpMessage) => {
    handlers[m.op](...m.args).then(
      (value) => process.send!({ id: m.id, ok: true, value } satisfies ReplyMessage),
      (e: Error) => process.send!({ id: m.id, ok: false, error: `${(e as { code?: string }).code ?? 'Error'}: ${e.message}` } satisfies ReplyMessage),
    );
  });
  process.send!({ ready: engine.segmentName });
}

export interface TargetProcess extends TargetMemory {
  segment: string;
  child: ChildProcess;
  /** SIGSTOP: the target stops answering (for deadline and abort tests). */
  stall(): Promise<void>;
  resume(): Promise<void>;
  kill(): void;
  close(): Promise<void>;
}

/**
 * How to run the target script: as is for JavaScript; with tsx's loader for TypeScript,
 * which must then be installed (it is the caller's choice of runner, not a dependency).
 */
function defaultExecArgv(script: string): string[] {
  if (!/\.[mc]?ts$/.test(script)) return [];
  try {
    createRequire(import.meta.url).resolve('tsx');
  } catch {
    throw new Error(
      `the target script ${script} is TypeScript, and tsx is not installed to run it: npm install -D tsx, pass execArgv for another loader, or point at compiled JavaScript`,
    );
  }
  return ['--import', 'tsx'];
}

/** Forks `script` (which calls `serveTargetProcess`) with the engine config. */
export function spawnTargetProcess(
  script: string,
  config: TeConfigInput,
  options: { env?: NodeJS.ProcessEnv; execArgv?: string[] } = {},
): Promise<TargetProcess> {
  let execArgv: string[];
  try {
    execArgv = options.execArgv ?? defaultExecArgv(script);
  } catch (e) {
    return Promise.reject(e);
  }
  const child = fork(script, [], {
    env: { ...process.env, ...options.env, TE_TARGET_CONFIG: JSON.stringify(config) },
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  // A dead target must fail the call that needed it, never crash the suite (EPIPE, ERR_IPC_CHANNEL_CLOSED).
  child.on('error', () => undefined);
  const ipc = new OpChannel(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`target process ${script} did not start within 20 s`)), 20_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      ipc.failAll(new Error(`target process exited (${code})`));
      reject(new Error(`target process exited with ${code} before it was ready`));
    });
    child.on('message', (m: ReplyMessage | { ready: string }) => {
      if (!('ready' in m)) return ipc.settle(m);
      clearTimeout(timer);
      resolve(targetHandle(child, m.ready, ipc));
    });
  });
}

/** The parent's side of the op protocol: each op sent with an id, answered by a reply with the same id. */
class OpChannel {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  constructor(private readonly child: ChildProcess) {}

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the answer's shape depends on the op; callers name it
  call(op: Op, ...args: unknown[]): Promise<any> {
    const { child, pending } = this;
    return new Promise((resolve, reject) => {
      if (!child.connected) return reject(new Error(`target process is gone (${child.signalCode ?? child.exitCode ?? 'disconnected'}); "${op}" cannot run`));
      const id = this.nextId++;
      pending.set(id, { resolve, reject });
      const lost = (err: Error): void => {
        pending.delete(id);
        reject(new Error(`target process is gone: "${op}" could not be sent (${err.message})`));
      };
      try {
        child.send({ id, op, args } satisfies OpMessage, (err) => err && lost(err));
      } catch (err) {
        lost(err as Error);
      }
    });
  }

  settle(m: ReplyMessage): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) p.resolve(m.value);
    else p.reject(new Error(m.error));
  }

  failAll(error: Error): void {
    for (const p of this.pending.values()) p.reject(error);
  }
}

/** The ready target as the suite sees it: memory ops over IPC, and signals for stall, resume and kill. */
function targetHandle(child: ChildProcess, segment: string, ipc: OpChannel): TargetProcess {
  let killed = false;
  return {
    segment,
    child,
    alloc: async (length, opts) => BigInt(await ipc.call('alloc', length, opts)),
    read: async (addr, length) => new Uint8Array(Buffer.from(await ipc.call('read', addr.toString(), length), 'base64')),
    write: (addr, data) => ipc.call('write', addr.toString(), Buffer.from(data).toString('base64')),
    free: (addr) => ipc.call('free', addr.toString()),
    notifications: async () =>
      ((await ipc.call('notifications')) as { from: string; payload: string; snapshot?: string }[]).map((n): ReceivedNotification => ({
        from: n.from,
        payload: new Uint8Array(Buffer.from(n.payload, 'base64')),
        ...(n.snapshot ? { snapshot: new Uint8Array(Buffer.from(n.snapshot, 'base64')) } : {}),
      })),
    stall: async () => {
      await stopProcess(child.pid!);
    },
    resume: async () => void child.kill('SIGCONT'),
    kill: () => {
      killed = true;
      child.kill('SIGKILL');
    },
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      if (killed || !child.connected) {
        await exited; // killed already: wait for the exit, send nothing to a dead channel
        return;
      }
      child.kill('SIGCONT');
      await Promise.race([ipc.call('close').catch(() => undefined), new Promise((r) => setTimeout(r, 3000))]);
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(t);
    },
  };
}
