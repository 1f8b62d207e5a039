// The GPU runtime suite (test/gpu/runtime.ts) cannot run its GPU path here, so the CI checks
// what it can: without a GPU it stops with exit 2 and the probe's reason in
// runtime-results.json; and its host rehearsal (TE_GPU_RUNTIME_HOST=1: the same cases with
// the KV in host memory over mooncake-tcp) passes every check, the verifier included, so a
// GPU session does not find the suite's own mistakes first.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addonLoader, probeCuda, type NativeCudaModule } from '@te/cuda';
import { firstLineOnly } from './fixtures/node-lines.js';

const root = join(import.meta.dirname, '..');
const suite = join(root, 'test', 'gpu', 'runtime.ts');
const gpu = probeCuda(
  addonLoader<NativeCudaModule>({
    plugin: 'mooncake-intra-nvlink',
    pkg: '@te/mooncake-intra-nvlink',
    addon: 'te_mooncake_intra_nvlink.node',
    envVar: 'TE_MOONCAKE_INTRA_NVLINK_ADDON',
    root: join(root, 'plugins', 'mooncake-intra-nvlink'),
  }),
).available;

function run(env: NodeJS.ProcessEnv, timeout: number) {
  const out = mkdtempSync(join(tmpdir(), 'te-gpu-runtime-'));
  try {
    const r = spawnSync(process.execPath, ['--import', 'tsx', suite], { cwd: root, encoding: 'utf8', timeout, env: { ...process.env, ...env, OUT: out } });
    const results = JSON.parse(readFileSync(join(out, 'runtime-results.json'), 'utf8'));
    return { status: r.status, results, output: `${r.stdout.slice(-6000)}\n${r.stderr.slice(-3000)}` };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

const noGpuCase = 'without a GPU the runtime suite exits 2, the reason in runtime-results.json';
if (gpu) {
  console.log(`  skipped "${noGpuCase}": a GPU is present (test/gpu/run.sh runs the suite on it)`);
  test.skip(noGpuCase, () => undefined);
} else {
  test(noGpuCase, () => {
    const r = run({}, 60_000);
    assert.is(r.status, 2, r.output);
    assert.match(r.results.failures[0], /^no usable GPU: no CUDA device: .+/);
    assert.equal(r.results.checks, []);
  });
}

const rehearsal = 'host rehearsal: every case of the suite passes with the KV in host memory, the verifier shown failing on a flipped byte';
const rehearse = firstLineOnly('minutes of host-memory rehearsal, the same whichever Node.js line runs it');
rehearse(rehearsal, () => {
  const r = run({ TE_GPU_RUNTIME_HOST: '1' }, 420_000);
  assert.is(r.status, 0, r.output);
  assert.equal(r.results.failures, [], r.output);
  const names: string[] = r.results.checks.map((c: { name: string }) => c.name);
  for (const part of [
    'PD mooncake-tcp TP 1→1: room 1',
    'PD mooncake-tcp TP 2→4: room 3',
    'layerwise mooncake-tcp',
    'restarted decode',
    'abort mid-transfer (mooncake-tcp): both sides end failed',
    'finds one flipped byte',
    'copy mooncake-tcp h2d 1048576 B: the bytes landed',
  ]) {
    assert.ok(
      names.some((n) => n.includes(part)),
      `no check "${part}" in:\n${names.join('\n')}`,
    );
  }
  assert.ok(r.results.checks.every((c: { ok: boolean }) => c.ok));
  assert.type(r.results.figures['pd mooncake-tcp'].ratio, 'number');
  assert.type(r.results.figures.layerwise.hiddenShare, 'number');
  assert.is(r.results.figures['copy mooncake-tcp'].rows.length, 6);
});

test.run();
