// MC_FORCE_MNNVL (multi-node NVLink) and MC_INTRANODE_NVLINK (intra-node NVLink) are
// mutually exclusive: te refuses the combination instead of silently picking one.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeTransferEngine, createTransferEngine, initTransferEngine, loadConfig } from '@te/connector';
import { rejectsWith } from './helpers.js';

const BOTH = { MC_FORCE_MNNVL: '1', MC_INTRANODE_NVLINK: '1' };

test('an engine from the environment with both set fails with CONFLICTING_ENV naming both', async () => {
  const saved = { ...process.env };
  Object.assign(process.env, BOTH, { TE_CONNECTOR: 'mooncake-tcp' });
  try {
    const err = await rejectsWith(initTransferEngine(), 'CONFLICTING_ENV');
    assert.match(err.message, /MC_FORCE_MNNVL/);
    assert.match(err.message, /MC_INTRANODE_NVLINK/);
  } finally {
    process.env = saved;
    await closeTransferEngine().catch(() => undefined);
  }
  await rejectsWith(async () => loadConfig({ env: { ...BOTH, TE_CONNECTOR: 'mooncake-tcp' } }), 'CONFLICTING_ENV');
  await rejectsWith(createTransferEngine({ connector: 'mooncake-tcp', forceMnnvl: true, intranodeNvlink: true }), 'CONFLICTING_ENV');
});

test('one of them alone adds its transport', () => {
  assert.ok(loadConfig({ env: { MC_INTRANODE_NVLINK: '1', TE_CONNECTOR: 'mooncake-tcp' } }).intranodeNvlink);
  assert.ok(loadConfig({ env: { MC_FORCE_MNNVL: '1', TE_CONNECTOR: 'mooncake-tcp' } }).forceMnnvl);
});

test('`te doctor` exits non-zero with both set and names both', () => {
  const cli = join(dirname(createRequire(import.meta.url).resolve('@te/cli/package.json')), 'dist', 'te.js');
  const env: NodeJS.ProcessEnv = { ...process.env, ...BOTH, NO_COLOR: '1' };
  delete env.TE_CONFIG;
  const r = spawnSync(process.execPath, [cli, 'doctor'], { env, encoding: 'utf8', timeout: 60_000 });
  assert.is.not(r.status, 0, `te doctor exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /CONFLICTING_ENV/);
  assert.match(r.stdout, /MC_FORCE_MNNVL/);
  assert.match(r.stdout, /MC_INTRANODE_NVLINK/);
  // Without the conflict, doctor lists this plugin with the precise reason it cannot run here.
  const ok = spawnSync(process.execPath, [cli, 'doctor', '--json'], { env: { ...env, MC_FORCE_MNNVL: '0' }, encoding: 'utf8', timeout: 60_000 });
  const report = JSON.parse(ok.stdout) as { plugins: { name: string; loaded: boolean; available?: boolean; reason?: string }[] };
  const mine = report.plugins.find((p) => p.name === 'mooncake-intra-nvlink');
  assert.ok(mine?.loaded, `doctor loads mooncake-intra-nvlink: ${JSON.stringify(mine)}`);
  if (mine!.available === false) assert.match(mine!.reason!, /no CUDA device/);
});

test.run();
