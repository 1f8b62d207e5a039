// probe() reads the plugin's options from the environment through the plugin's own schema,
// as create() does. Before, it compared TE_RDMA_ALLOW_SHM with "1" (so "true", which the
// transport takes, was "no"), split TE_RDMA_NICS itself, and ignored the other variables:
// a TE_RDMA_MAX_RAILS the transport refuses was reported as available.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import plugin from '../src/index.js';

async function probeWith(env: Record<string, string>) {
  const saved = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('TE_RDMA_')));
  for (const k of Object.keys(saved)) delete process.env[k];
  Object.assign(process.env, env);
  try {
    return await plugin.probe!();
  } finally {
    for (const k of Object.keys(env)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}

test('TE_RDMA_ALLOW_SHM=true permits the shm provider in probe() as it does in create()', async () => {
  for (const allow of ['true', 'yes', '1']) {
    const r = await probeWith({ TE_RDMA_PROVIDER: 'shm', TE_RDMA_ALLOW_SHM: allow });
    assert.is(r.available, true, `${allow}: ${r.reason}`);
    assert.is(r.details?.chosen, 'shm', allow);
  }
  const refused = await probeWith({ TE_RDMA_PROVIDER: 'shm', TE_RDMA_ALLOW_SHM: 'false' });
  assert.is(refused.available, false);
  assert.match(refused.reason ?? '', /shm/);
});

test('a variable the schema refuses makes the plugin unavailable, naming it', async () => {
  const r = await probeWith({ TE_RDMA_MAX_RAILS: 'junk' });
  assert.is(r.available, false);
  assert.match(r.reason ?? '', /TE_RDMA_MAX_RAILS to be a number, got "junk"/);
  const ok = await probeWith({});
  assert.is(ok.available, true, ok.reason);
});

test.run();
