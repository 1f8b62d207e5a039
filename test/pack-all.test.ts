import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * The way a framework consumes te: `npm pack` of every package (each packs its build; the
 * plugins their native sources, built at install), installed together into an empty folder
 * from the tarballs, then `te doctor` and a verified loopback transfer run there.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const work = mkdtempSync(join(tmpdir(), 'te-pack-all-'));
const run = (cmd: string, args: string[], cwd = work) => execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 600_000 });
/** The environment without te's own variables (unset, not empty: an empty value is a setting). */
function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env, FORCE_COLOR: '0' };
  for (const k of Object.keys(env)) if (/^(TE|MC)_/.test(k)) delete env[k];
  return env;
}
const PACKAGES = ['packages/connector', 'packages/fabric', 'packages/cuda', 'packages/testkit', 'packages/disagg', 'packages/cli', 'plugins/mooncake-tcp', 'plugins/mooncake-rdma', 'plugins/barex', 'plugins/mooncake-intra-nvlink', 'plugins/mooncake-nvlink', 'plugins/mooncake-shm'];

let installed = false;
function install(): void {
  if (installed) return;
  installed = true;
  for (const p of PACKAGES) run('npm', ['pack', '--silent', '--pack-destination', work], join(root, p));
  const tarballs = readdirSync(work).filter((f) => f.endsWith('.tgz'));
  assert.is(tarballs.length, PACKAGES.length, tarballs.join(', '));
  writeFileSync(join(work, 'package.json'), JSON.stringify({ name: 'framework', version: '1.0.0', private: true, type: 'module' }));
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs.map((t) => `./${t}`)]);
}
test.after(() => rmSync(work, { recursive: true, force: true }));

test('every package packs its build; all install together from the tarballs', () => {
  install();
  for (const name of ['connector', 'disagg', 'cli', 'mooncake-tcp', 'fabric', 'cuda']) {
    const files = readdirSync(join(work, 'node_modules', '@te', name, 'dist'));
    assert.ok(files.some((f) => f.endsWith('.js')), `@te/${name} has no built JavaScript`);
  }
});

test('te doctor in the installed folder: the default connector is ready', () => {
  install();
  const r = spawnSync('npx', ['te', 'doctor'], { cwd: work, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
  assert.is(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /The configured connector is ready/);
});

test('a verified loopback transfer and a PD room from the installed packages', () => {
  install();
  const bench = spawnSync('npx', ['te', 'bench', '--loopback', '--verify', '--json', '--duration', '0.5', '--block-size', '64KiB'], { cwd: work, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
  assert.is(bench.status, 0, bench.stderr);
  assert.is(JSON.parse(bench.stdout.trim().split('\n').pop()!).verified, true);
  // A framework's own script: @te/disagg's bootstrap server from the installed package answers.
  writeFileSync(
    join(work, 'pd.mjs'),
    `import { startBootstrapServer } from '@te/disagg';
const s = await startBootstrapServer({ host: '127.0.0.1', port: 0 });
const r = await fetch('http://127.0.0.1:' + s.port + '/health');
console.log(await r.text());
await s.close();`,
  );
  assert.is(run('node', ['pd.mjs']).trim(), 'OK');
});

test.run();
