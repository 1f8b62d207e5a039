import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * A machine where the plugins were built before libfabric (or the CUDA toolkit) was
 * installed: `te doctor` says the plugin was built without it and names the commands that
 * rebuild it. Each command is run here as doctor prints it, and must bring the dependency
 * back: the native build notices that what its CMake cache was configured without is there
 * now and configures again (native/scripts/plugin-native.mjs), and nx's build cache key
 * includes what is installed (nx.json, native/scripts/native-deps.mjs), so it does not
 * restore the build made without it. "Not installed" is simulated with the switches the
 * build honours: TE_FABRIC_DISABLE=1 (libfabric) and TE_WITH_CUDA=0 (the CUDA toolkit).
 * The real build folders are used; every case ends with the dependency built in again.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const te = join(root, 'packages', 'cli', 'bin', 'te.js');

function sh(command: string, env: Record<string, string> = {}): string {
  const r = spawnSync('bash', ['-c', command], {
    cwd: root,
    encoding: 'utf8',
    timeout: 480_000,
    env: { ...process.env, FORCE_COLOR: '0', NX_TUI: 'false', TE_FABRIC_DISABLE: '', TE_WITH_CUDA: '', ...env },
  });
  assert.is(r.status, 0, `${command}: exit ${r.status}\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`);
  return `${r.stdout}\n${r.stderr}`;
}

interface DoctorRow {
  name: string;
  available: boolean;
  reason?: string;
  details?: Record<string, unknown>;
}

function doctor(plugin: string): DoctorRow {
  const r = spawnSync(process.execPath, [te, 'doctor', '--json'], { cwd: root, encoding: 'utf8', timeout: 60_000 });
  const row = (JSON.parse(r.stdout) as { plugins: DoctorRow[] }).plugins.find((p) => p.name === plugin);
  assert.ok(row, `te doctor lists ${plugin}`);
  return row!;
}

/** The rebuild commands doctor's reason names: "... then rebuild (npm rebuild @te/x, or npm run build:native -w @te/x)". */
function rebuildCommands(reason: string): string[] {
  const m = /then rebuild \((npm rebuild @te\/[\w-]+), or (npm run build:native -w @te\/[\w-]+)\)/.exec(reason);
  assert.ok(m, `no rebuild commands in: ${reason}`);
  return [m![1]!, m![2]!];
}

const deps = spawnSync(process.execPath, [join(root, 'native/scripts/native-deps.mjs')], {
  encoding: 'utf8',
  env: { ...process.env, TE_FABRIC_DISABLE: '', TE_WITH_CUDA: '' },
}).stdout;
const FABRIC = ['mooncake-rdma', 'barex'];

/** Builds `plugin` without libfabric with `command`; doctor must say so and name the two rebuild commands. */
function buildWithoutLibfabric(plugin: string, command: string): string[] {
  sh(command, { TE_FABRIC_DISABLE: '1' });
  const row = doctor(plugin);
  assert.is(row.available, false);
  assert.match(row.reason ?? '', /built without libfabric/);
  assert.match(row.reason ?? '', /apt-get install -y libfabric-dev/);
  return rebuildCommands(row.reason!);
}

function assertLibfabricBack(plugin: string): void {
  const row = doctor(plugin);
  assert.is(row.available, true, `${plugin}: ${row.reason}`);
  assert.is(row.details?.builtWithLibfabric, true);
}

if (!deps.includes('libfabric=yes')) {
  test.skip('libfabric remedies — skipped: libfabric is not installed here (apt-get install -y libfabric-dev libfabric-bin)', () => undefined);
} else {
  // Each plugin is built without libfabric once (a build costs about half a minute on 2
  // cores); each of doctor's two commands then brings one of them back. mooncake-rdma's
  // build without it goes through lerna, so that nx's cache holds it: a lerna build once
  // libfabric is back must not restore it.
  test("built without libfabric: doctor names both rebuild commands; npm run build:native brings barex back, npm rebuild @te/mooncake-rdma mooncake-rdma; nx's build cache does not restore the build made without libfabric", () => {
    try {
      const barex = buildWithoutLibfabric('barex', 'npm run build:native -w @te/barex');
      const rdma = buildWithoutLibfabric('mooncake-rdma', 'npx lerna run build --scope @te/mooncake-rdma');
      // Only the plugin that needs it: a bare `npm rebuild` would compile every addon again.
      assert.equal(rdma, ['npm rebuild @te/mooncake-rdma', 'npm run build:native -w @te/mooncake-rdma']);
      assert.equal(barex, ['npm rebuild @te/barex', 'npm run build:native -w @te/barex']);
      const out = sh(barex[1]!);
      assert.match(out, /configured without libfabric, which is there now: configuring the native build again/);
      assertLibfabricBack('barex');
      sh(rdma[0]!);
      assertLibfabricBack('mooncake-rdma');
      // Were what is installed not part of nx's cache key, this build's key would be that of
      // the build without libfabric, whose outputs nx would put back.
      sh('npx lerna run build --scope @te/mooncake-rdma');
      assertLibfabricBack('mooncake-rdma');
    } finally {
      for (const plugin of FABRIC) sh(`npm run build:native -w @te/${plugin}`);
    }
  });
}

if (!deps.includes('cuda=yes')) {
  test.skip('CUDA toolkit remedy — skipped: no CUDA toolkit here (nvcc not found)', () => undefined);
} else {
  test('built without the CUDA toolkit: npm run build:native builds it with CUDA once the toolkit is there', () => {
    const plugin = 'mooncake-intra-nvlink';
    try {
      sh(`npm run build:native -w @te/${plugin}`, { TE_WITH_CUDA: '0' });
      assert.is(doctor(plugin).details?.builtWithCuda, false);
      const out = sh(`npm run build:native -w @te/${plugin}`);
      assert.match(out, /configured without the CUDA toolkit, which is there now: configuring the native build again/);
      assert.is(doctor(plugin).details?.builtWithCuda, true);
    } finally {
      sh(`npm run build:native -w @te/${plugin}`);
    }
  });
}

test.run();
