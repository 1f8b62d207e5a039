import { execFileSync } from 'node:child_process';

/** Runs a command of iproute2 (ip, tc, bridge) and returns its stdout; throws with its stderr. */
export function run(cmd: string, args: string[], timeoutMs = 10_000): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')}: ${(err.stderr || err.message).trim()}`);
  }
}

export const ip = (...args: string[]): string => run('ip', args);

/** The same, for teardown: a step that fails (already gone) must not stop the next one. */
export function quietly(cmd: string, args: string[]): void {
  try {
    execFileSync(cmd, args, { stdio: 'ignore', timeout: 10_000 });
  } catch {
    // already removed, or never created
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
