import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUILTIN_PLUGINS } from '@te/connector';

/*
 * The way a framework consumes te: `npm pack` of every package (each packs its build; the
 * plugins their native sources, built at install), installed together into an empty folder
 * from the tarballs, then `te doctor` and a verified loopback transfer run there. The same
 * folder checks @te/connector from both module systems, with types (TypeScript installed
 * beside it), and a third-party plugin loaded through modulePath. One install serves every
 * case: the plugins' native builds at install are most of this file's time.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const work = mkdtempSync(join(tmpdir(), 'te-pack-all-'));
const run = (cmd: string, args: string[], cwd = work) =>
  execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 600_000 });
/** The environment without te's own variables (unset, not empty: an empty value is a setting). */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, FORCE_COLOR: '0' };
  for (const k of Object.keys(env)) if (/^(TE|MC)_/.test(k)) delete env[k];
  return env;
}
const PACKAGES = [
  'packages/connector',
  'packages/fabric',
  'packages/cuda',
  'packages/testkit',
  'packages/staging',
  'packages/disagg',
  'packages/cli',
  'plugins/mooncake-tcp',
  'plugins/mooncake-rdma',
  'plugins/barex',
  'plugins/mooncake-intra-nvlink',
  'plugins/mooncake-nvlink',
  'plugins/mooncake-shm',
];

let installed = false;
function install(): void {
  if (installed) return;
  installed = true;
  for (const p of PACKAGES) run('npm', ['pack', '--silent', '--pack-destination', work], join(root, p));
  const tarballs = readdirSync(work).filter((f) => f.endsWith('.tgz'));
  assert.is(tarballs.length, PACKAGES.length, tarballs.join(', '));
  writeFileSync(join(work, 'package.json'), JSON.stringify({ name: 'framework', version: '1.0.0', private: true, type: 'module' }));
  run('npm', [
    'install',
    '--prefer-offline',
    '--no-audit',
    '--no-fund',
    '--loglevel=error',
    ...tarballs.map((t) => `./${t}`),
    'typescript@5.9.3',
    '@types/node@^20.19.0',
  ]);
  cpSync(join(root, 'test', 'fixtures', 'third-party-plugin'), join(work, 'plugins', 'example'), { recursive: true });
}
test.after(() => rmSync(work, { recursive: true, force: true }));

test('every package packs its build; all install together from the tarballs', () => {
  install();
  for (const name of ['connector', 'disagg', 'cli', 'mooncake-tcp', 'fabric', 'cuda']) {
    const files = readdirSync(join(work, 'node_modules', '@te', name, 'dist'));
    assert.ok(
      files.some((f) => f.endsWith('.js')),
      `@te/${name} has no built JavaScript`,
    );
  }
  // The addons were compiled at install in unity batches (plugin-native.mjs), the faster build.
  for (const name of ['staging', 'mooncake-tcp', 'mooncake-rdma', 'barex', 'mooncake-intra-nvlink', 'mooncake-nvlink', 'mooncake-shm']) {
    const cache = readFileSync(join(work, 'node_modules', '@te', name, 'build', 'CMakeCache.txt'), 'utf8');
    assert.match(cache, /^CMAKE_UNITY_BUILD:\w+=ON$/m, `@te/${name} was not configured as a unity build`);
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
  const bench = spawnSync('npx', ['te', 'bench', '--loopback', '--verify', '--json', '--duration', '0.5', '--block-size', '64KiB'], {
    cwd: work,
    encoding: 'utf8',
    env: cleanEnv(),
    timeout: 120_000,
  });
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

test('@te/connector from an ES module: loads a third-party plugin via modulePath', () => {
  install();
  writeFileSync(
    join(work, 'esm.mjs'),
    `import { PLUGIN_API_VERSION, TransferError, PluginRegistry } from '@te/connector';
     const p = await new PluginRegistry({ builtins: false }).resolve({ connector: 'example-memcpy', modulePath: './plugins/example' });
     console.log(JSON.stringify({ api: PLUGIN_API_VERSION, err: new TransferError('TIMEOUT', 'x').code, plugin: p.name }));`,
  );
  assert.equal(JSON.parse(run('node', ['esm.mjs'])), { api: 1, err: 'TIMEOUT', plugin: 'example-memcpy' });
});

test('@te/connector from CommonJS: require works', () => {
  install();
  writeFileSync(
    join(work, 'cjs.cjs'),
    `const c = require('@te/connector'); console.log(JSON.stringify({ api: c.PLUGIN_API_VERSION, names: new c.PluginRegistry().names().length }));`,
  );
  // The installed CommonJS build knows every built-in plugin this repository's build does.
  assert.equal(JSON.parse(run('node', ['cjs.cjs'])), { api: 1, names: Object.keys(BUILTIN_PLUGINS).length });
});

test('@te/connector types resolve for both module systems', () => {
  install();
  const body = `import { definePlugin, type TransportPlugin, type TeConfig, TransferError } from '@te/connector';
const c: Pick<TeConfig, 'connector'> = { connector: 'mooncake-tcp' };
const e: TransferError = new TransferError('TIMEOUT', 'x');
export const ok: [string, string] = [c.connector, e.code];
export type P = TransportPlugin;
export const d = definePlugin;
`;
  writeFileSync(join(work, 'check.mts'), body);
  writeFileSync(
    join(work, 'check.cts'),
    body.replace(
      /^import \{ definePlugin, type TransportPlugin, type TeConfig, TransferError \}/m,
      'import { definePlugin, type TransportPlugin, type TeConfig, TransferError }',
    ),
  );
  writeFileSync(
    join(work, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, types: ['node'], skipLibCheck: false },
      files: ['check.mts', 'check.cts'],
    }),
  );
  run(join(work, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json']);
  // A type error must be reported (the check can fail).
  writeFileSync(join(work, 'check.mts'), `${body}\nexport const wrong: number = new TransferError('TIMEOUT', 'x').code;\n`);
  assert.throws(() => run(join(work, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json']));
});

test.run();
