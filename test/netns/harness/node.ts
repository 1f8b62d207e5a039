import { spawn } from 'node:child_process';
import { compileWorkerScript } from '@te/testkit';

/*
 * A Node.js process inside a network namespace: `ip netns exec <ns> node …`. ip execs node
 * in place, so the child's pid is node's, and node finds the IPC channel ip inherited
 * (NODE_CHANNEL_FD). Protocol: the process's first message is {ready: true, …} or
 * {ready: false, error}; a call is {id, op, args} answered by {id, ok, value | error};
 * {op: 'stop'} asks it to close and exit (the `te demo` workers speak the same).
 */
export interface NodeProcess {
  readonly pid: number;
  readonly ns: string;
  /** The ready message (what the process reports about itself: ports, segment name). */
  readonly info: Record<string, unknown>;
  /** Resolves with the value of the process's reply, read as `T` (the reply is not checked). */
  call<T = unknown>(op: string, args?: unknown, timeoutMs?: number): Promise<T>;
  /** Asks the process to stop; SIGKILL after `timeoutMs`. Resolves once it exited. */
  stop(timeoutMs?: number): Promise<void>;
  kill(): void;
  readonly exited: boolean;
}

/** A message from the process: its ready report first, then replies to calls (by `id`: `value` or `error`). */
interface NodeMessage {
  ready?: unknown;
  id?: number;
  ok?: boolean;
  value?: unknown;
  error?: string;
  [field: string]: unknown;
}

export interface SpawnOptions {
  env?: NodeJS.ProcessEnv;
  readyTimeoutMs?: number;
}

export async function spawnNode(ns: string, script: string, o: SpawnOptions = {}): Promise<NodeProcess> {
  // A TypeScript fixture is bundled to JavaScript first: no TypeScript loader in each process.
  const argv = ['netns', 'exec', ns, process.execPath, /\.[mc]?ts$/.test(script) ? await compileWorkerScript(script) : script];
  // stdout goes to our stderr: the test runner's stdout carries uvu's totals, which are parsed.
  const child = spawn('ip', argv, { env: { ...process.env, ...o.env }, stdio: ['ignore', 2, 2, 'ipc'] });
  const what = `${script.split('/').pop()} in ${ns}`;
  let exited = false;
  let next = 1;
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  child.on('error', () => undefined);
  child.on('exit', (code, signal) => {
    exited = true;
    for (const p of pending.values()) p.reject(new Error(`${what} exited (${signal ?? code})`));
    pending.clear();
  });
  child.on('message', (m: NodeMessage | null) => {
    if (m?.id === undefined) return;
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.ok) p?.resolve(m.value);
    else p?.reject(new Error(`${what}: ${m.error}`));
  });
  const kill = (): void => {
    if (!exited) child.kill('SIGKILL');
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      kill();
      reject(new Error(`${what} was not ready within ${o.readyTimeoutMs ?? 20_000} ms`));
    }, o.readyTimeoutMs ?? 20_000);
    const onExit = (code: number | null, signal: string | null): void => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${signal ?? code}) before it was ready`));
    };
    child.once('exit', onExit);
    child.once('message', (m: NodeMessage | null) => {
      clearTimeout(timer);
      child.off('exit', onExit);
      if (!m?.ready) {
        kill();
        return reject(new Error(`${what} failed to start: ${m?.error ?? JSON.stringify(m)}`));
      }
      resolve({
        pid: child.pid!,
        ns,
        info: m,
        get exited() {
          return exited;
        },
        kill,
        call: <T>(op: string, args?: unknown, timeoutMs = 30_000) =>
          new Promise<T>((res, rej) => {
            if (exited) return rej(new Error(`${what} has exited`));
            const id = next++;
            const t = setTimeout(() => {
              pending.delete(id);
              rej(new Error(`${what}: "${op}" did not answer within ${timeoutMs} ms`));
            }, timeoutMs);
            pending.set(id, { resolve: (v) => (clearTimeout(t), res(v as T)), reject: (e) => (clearTimeout(t), rej(e)) });
            child.send({ id, op, args });
          }),
        stop: async (timeoutMs = 5_000) => {
          if (exited) return;
          child.send({ op: 'stop' }, () => undefined);
          const t = setTimeout(kill, timeoutMs);
          await gone;
          clearTimeout(t);
        },
      });
    });
  });
}
