import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export interface SpawnedTarget {
  segment: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

const teEntry = (): string => fileURLToPath(new URL('./te.js', import.meta.url));

/**
 * Starts `te bench --mode target` as a child process on this machine and waits for the
 * line announcing its segment; used by `--loopback` and `te demo`.
 */
export function spawnBenchTarget(args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 30_000): Promise<SpawnedTarget> {
  const child = spawn(process.execPath, [teEntry(), 'bench', '--mode', 'target', ...args], { stdio: ['pipe', 'pipe', 'inherit'], env });
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.stdin!.end();
    const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(kill);
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`bench target did not start within ${timeoutMs} ms`));
    }, timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      // The target printed its own error (stderr is inherited): end with its exit code, quietly.
      reject(Object.assign(new Error(`bench target exited (code ${code}) before it was ready`), { quiet: true, exitCode: code ?? 1 }));
    });
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      try {
        const msg = JSON.parse(line) as { ready?: string };
        if (msg.ready) {
          clearTimeout(timer);
          resolve({ segment: msg.ready, child, stop });
        }
      } catch {
        // Not ours.
      }
    });
  });
}
