// The GPU harness runs on a machine without node_modules, from the bundle test/gpu/prepare.sh
// makes: the bundle must build from the current sources and start. Without a GPU it must
// stop with exit 2 and the probe's reason in gpu-results.json; with one, it runs a short
// pass (transfers up to 1 MiB) and every check must pass.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const addon = (plugin: string) => join(root, 'plugins', plugin, 'build', 'Release', `te_${plugin.replace(/-/g, '_')}.node`);

test('the bundled GPU harness builds from the sources and starts: exit 2 with the reason without a GPU, every check passing with one', () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-gpu-bundle-'));
  try {
    const bundle = join(dir, 'harness.mjs');
    const b = spawnSync(process.execPath, [join(root, 'test', 'gpu', 'bundle.mjs'), bundle], { encoding: 'utf8', timeout: 120_000 });
    assert.is(b.status, 0, `bundle failed:\n${b.stdout}\n${b.stderr}`);
    assert.ok(existsSync(bundle));
    const out = join(dir, 'out');
    const r = spawnSync(process.execPath, [bundle], {
      encoding: 'utf8',
      timeout: 300_000,
      env: {
        ...process.env,
        OUT: out,
        TE_GPU_MAX_BYTES: String(1 << 20),
        TE_MOONCAKE_INTRA_NVLINK_ADDON: addon('mooncake-intra-nvlink'),
        TE_MOONCAKE_NVLINK_ADDON: addon('mooncake-nvlink'),
        TE_MOONCAKE_TCP_ADDON: addon('mooncake-tcp'),
      },
    });
    const results = JSON.parse(readFileSync(join(out, 'gpu-results.json'), 'utf8'));
    if (r.status === 2) {
      assert.is(results.probes.intra.available, false);
      assert.match(results.failures[0], /^no usable GPU: .+/);
    } else {
      assert.is(r.status, 0, `harness failed:\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
      assert.equal(results.failures, []);
      assert.ok(results.checks.length > 0);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('test/gpu/bench.sh without the packed runtime: exit 3, naming what to run first', () => {
  // A copy of the script in an empty tree: no .gpu/ there, as on a GPU machine nothing was carried to.
  const dir = mkdtempSync(join(tmpdir(), 'te-gpu-bench-'));
  try {
    mkdirSync(join(dir, 'test', 'gpu'), { recursive: true });
    for (const f of ['bench.sh', 'node-env.sh']) copyFileSync(join(root, 'test', 'gpu', f), join(dir, 'test', 'gpu', f));
    const r = spawnSync('bash', [join(dir, 'test', 'gpu', 'bench.sh')], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, OUT: join(dir, 'out') } });
    assert.is(r.status, 3, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /\.gpu\/runtime\.tar\.xz missing: run test\/gpu\/prepare\.sh on the build machine/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
