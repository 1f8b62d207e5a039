// One `te bench --loopback --verify` run (two processes; every byte checked), the way the
// comparison scripts all run te: the case's shape in, te's JSON result out. Throws when te
// bench exits non-zero (it says why on stderr, which is inherited).
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const te = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'packages', 'cli', 'dist', 'te.js');

/** `c`: { op, size, batch, concurrency }; `env`: extra environment for this run. */
export function runTeBench(plugin, c, duration, env = {}) {
  const args = [
    te,
    'bench',
    '--loopback',
    '--verify',
    '--json',
    '--plugin',
    plugin,
    '--op',
    c.op,
    '--block-size',
    String(c.size),
    '--batch-size',
    String(c.batch),
    '--concurrency',
    String(c.concurrency),
    '--duration',
    String(duration),
  ];
  const out = execFileSync(process.execPath, args, { encoding: 'utf8', env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return JSON.parse(out.trim().split('\n').pop());
}
