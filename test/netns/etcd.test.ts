import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync } from 'node:fs';
import { loadConfig } from '@te/connector';
import { Cluster, netnsSupport, testIf, type Support } from './harness/index.js';
import { ETCD, startEtcd } from './fixtures/etcd.js';
import { runPD } from './fixtures/pd-flow.js';

/*
 * Cluster metadata: etcd runs on a host of its own, and every rank publishes its segment
 * descriptor there and looks its peers up there (config `metadata: "etcd://host:2379"`),
 * instead of asking the peers themselves. The PD flow across hosts, every byte verified.
 */
function etcdSupport(): Support {
  const base = netnsSupport();
  if (!base.ok) return base;
  if (!existsSync(ETCD)) return { ok: false, reason: `${ETCD} is not installed (apt-get install -y etcd-server)` };
  try {
    loadConfig({ json: { connector: 'mooncake-tcp', metadata: 'etcd://127.0.0.1:2379' }, env: {} });
  } catch (e) {
    return { ok: false, reason: `this build has no etcd metadata backend (${(e as Error).message})` };
  }
  return { ok: true };
}

/** Every key etcd holds (v3 JSON gateway: a range from "\0" to "\0" is the whole keyspace). */
async function keys(url: string): Promise<string[]> {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const res = await fetch(`${url}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: b64('\0'), range_end: b64('\0'), keys_only: true }),
    signal: AbortSignal.timeout(5_000),
  });
  const body = (await res.json()) as { kvs?: { key: string }[] };
  return (body.kvs ?? []).map((kv) => Buffer.from(kv.key, 'base64').toString());
}

testIf(
  test,
  etcdSupport(),
  'PD TP 2→1 across hosts with etcd metadata on a third host: every rank publishes and looks up descriptors there, every byte verified',
  async () => {
    await Cluster.with(['etcd', 'prefill', 'decode'], async (c) => {
      const etcd = await startEtcd(c, 'etcd');
      try {
        const metadata = `etcd://${c.host('etcd').address}:2379`;
        await runPD(c, (address) => ({ connector: 'mooncake-tcp', bindAddress: address, metadata }), {
          // While the ranks run: each one's descriptor is in etcd, under the default prefix.
          during: async (segments) => assert.equal((await keys(etcd.url)).sort(), segments.map((s) => `te/segments/${s}`).sort()),
        });
        // A rank that closes revokes its lease: its key goes at once, not a TTL later.
        await c.stopProcesses();
        assert.equal(await keys(etcd.url), []);
      } finally {
        etcd.stop();
      }
    });
  },
);

test.run();
