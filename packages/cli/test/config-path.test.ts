import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/*
 * One configuration path: `te doctor`, `te bench` and `te demo` read config the same way
 * (defaults, $TE_CONFIG, the environment, flags) and refuse the same bad inputs.
 */
const te = fileURLToPath(new URL('../bin/te.js', import.meta.url));

const BAD: [string, NodeJS.ProcessEnv, string][] = [
  ['a negative transfer timeout', { TE_TRANSFER_TIMEOUT_MS: '-5' }, 'INVALID_CONFIG'],
  ['an invalid MC_FORCE_TCP', { MC_FORCE_TCP: 'maybe' }, 'INVALID_CONFIG'],
  ['a missing TE_CONFIG file', { TE_CONFIG: '/nonexistent/te.json' }, 'INVALID_CONFIG'],
  ['a TE_MODULE_PATH that does not exist', { TE_MODULE_PATH: '/nonexistent/plugin' }, 'INVALID_CONFIG'],
  ['MC_FORCE_MNNVL with MC_INTRANODE_NVLINK', { MC_FORCE_MNNVL: '1', MC_INTRANODE_NVLINK: '1' }, 'CONFLICTING_ENV'],
];
const COMMANDS: [string, string[]][] = [
  ['doctor', ['doctor']],
  ['bench', ['bench', '--loopback', '--duration', '0.2']],
  ['demo', ['demo', '--requests', '1']],
];

for (const [what, env, code] of BAD) {
  test(`${what} is refused by doctor, bench and demo alike (${code})`, () => {
    for (const [name, args] of COMMANDS) {
      const base = { ...process.env };
      for (const k of Object.keys(base)) if (/^(TE|MC)_/.test(k)) delete base[k]; // unset, not empty: an empty value is a setting
      const r = spawnSync(process.execPath, [te, ...args], { encoding: 'utf8', env: { ...base, ...env }, timeout: 60_000 });
      assert.ok(r.status !== 0 && r.status !== null, `te ${name} exited ${r.status} with ${JSON.stringify(env)}`);
      assert.match(r.stdout + r.stderr, code, `te ${name}: ${r.stdout}${r.stderr}`);
    }
  });
}

test('te bench --mode target keeps serving with stdin closed, and stops on SIGTERM', async () => {
  const child = spawn(process.execPath, [te, 'bench', '--mode', 'target', '--bytes', '1MiB'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const ready = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (l) => l.includes('"ready"') && resolve(l));
    child.once('exit', (c) => reject(new Error(`target exited early (${c})`)));
  });
  assert.match(ready, /"ready":"[^"]+:\d+"/);
  await new Promise((r) => setTimeout(r, 1_000));
  assert.is(child.exitCode, null, 'still serving with stdin closed');
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  child.kill('SIGTERM');
  assert.is(await exited, 0);
});

test.run();
