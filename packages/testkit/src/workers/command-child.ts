// A child process a test drives by named commands over its IPC channel: the parent forks
// it (optionally under a lower RLIMIT_NOFILE, through prlimit), waits for what it reports
// when ready, and calls its commands; the child serves them with serveCommands. Used by the
// out-of-descriptor tests, where the process under test must be another one.
import { fork, type ChildProcess } from 'node:child_process';
import { exitWithParent } from './exit-with-parent.js';
import { cpuSeconds } from './descriptors.js';

export interface CommandChildOptions {
  /** RLIMIT_NOFILE of the child (soft and hard), through `prlimit`. */
  nofile?: number;
  /** 'advanced' carries bigints and typed arrays (a SegmentDescriptor as it is). */
  serialization?: 'json' | 'advanced';
}

export interface CommandChild<R> {
  readonly child: ChildProcess;
  /** What the child sent with serveCommands; rejects when it exits first. */
  readonly ready: Promise<R>;
  /** The command's result; rejects when the child exits before answering. */
  call<T>(command: string): Promise<T>;
  /** Asks the child to run its `exit` command (2 s at most), then kills it; resolves once it has ended. */
  close(): Promise<void>;
}

type Message = { ready?: unknown; id?: number; result?: unknown };

export function forkCommandChild<R>(script: string, args: string[] = [], options: CommandChildOptions = {}): CommandChild<R> {
  const limited = options.nofile !== undefined;
  const child = fork(script, args, {
    ...(limited ? { execPath: 'prlimit', execArgv: [`--nofile=${options.nofile}:${options.nofile}`, process.execPath] } : {}),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    serialization: options.serialization ?? 'json',
  });
  let next = 1;
  const pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  const ready = new Promise<R>((resolve, reject) => {
    child.on('message', (m: Message) => {
      if (m.id === undefined) resolve(m.ready as R);
      else pending.get(m.id)?.resolve(m.result);
      pending.delete(m.id ?? 0);
    });
    child.once('exit', (code, signal) => {
      reject(new Error(`the child exited (${code ?? signal}) before it was ready`));
      for (const [id, call] of pending) call.reject(new Error(`the child exited (${code ?? signal}) before it answered call ${id}`));
      pending.clear();
    });
  });
  ready.catch(() => {});
  const ended = () => child.exitCode !== null || child.signalCode !== null;
  const call = <T>(command: string) =>
    new Promise<T>((resolve, reject) => {
      if (ended()) return reject(new Error(`the child exited (${child.exitCode ?? child.signalCode}) before it answered ${command}`));
      const id = next++;
      pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      // With a callback a closed channel is reported here, not as an 'error' event on the child.
      child.send({ id, command }, (error) => {
        if (error && pending.delete(id)) reject(error);
      });
    });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const close = async () => {
    if (!ended() && child.connected) await Promise.race([call('exit'), new Promise((r) => setTimeout(r, 2000))]).catch(() => {});
    if (!ended()) child.kill('SIGKILL');
    await exited;
  };
  return { child, ready, call, close };
}

/**
 * The child's side: ends with its parent, answers each command with what its function
 * returns (awaited), and reports `ready`. An `exit` command is added unless given.
 */
export function serveCommands(commands: Record<string, () => unknown>, ready: unknown): void {
  exitWithParent();
  const all: Record<string, () => unknown> = {
    exit: () => (setImmediate(() => process.exit(0)), true),
    ...commands,
  };
  process.on('message', async (m: { id: number; command: string }) => {
    const run = all[m.command];
    process.send!({ id: m.id, result: run ? await run() : `unknown command ${m.command}` });
  });
  process.send!({ ready });
}

/** CPU seconds process `pid` used over the next `ms` milliseconds, and the wall seconds measured. */
export async function cpuUsedOver(pid: number, ms: number): Promise<{ used: number; wall: number }> {
  const cpu0 = cpuSeconds(pid);
  const t0 = Date.now();
  await new Promise((r) => setTimeout(r, ms));
  return { used: cpuSeconds(pid) - cpu0, wall: (Date.now() - t0) / 1000 };
}
