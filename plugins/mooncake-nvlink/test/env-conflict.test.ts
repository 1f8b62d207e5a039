// MC_FORCE_MNNVL (this transport) and MC_INTRANODE_NVLINK are mutually exclusive.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeTransferEngine, createTransferEngine, initTransferEngine, loadConfig, transportsOf } from '@te/connector';
import { rejectsWith } from './helpers.js';

test('an engine with MC_FORCE_MNNVL and MC_INTRANODE_NVLINK both set fails with CONFLICTING_ENV', async () => {
  const saved = { ...process.env };
  Object.assign(process.env, { MC_FORCE_MNNVL: 'true', MC_INTRANODE_NVLINK: 'yes', TE_CONNECTOR: 'mooncake-tcp' });
  try {
    const err = await rejectsWith(initTransferEngine(), 'CONFLICTING_ENV');
    assert.match(err.message, /MC_FORCE_MNNVL/);
    assert.match(err.message, /MC_INTRANODE_NVLINK/);
  } finally {
    process.env = saved;
    await closeTransferEngine().catch(() => undefined);
  }
  await rejectsWith(createTransferEngine({ connector: 'mooncake-nvlink', forceMnnvl: true, intranodeNvlink: true }), 'CONFLICTING_ENV');
});

test('MC_FORCE_MNNVL alone adds mooncake-nvlink to the engine', () => {
  assert.equal(transportsOf(loadConfig({ env: { MC_FORCE_MNNVL: '1', TE_CONNECTOR: 'mooncake-tcp' } })), ['mooncake-tcp', 'mooncake-nvlink']);
});

test.run();
