import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import type { ECItemParams, TeConfigInput } from '@te/connector';
import { Cluster, netnsSupport, testIf } from './harness/index.js';

/*
 * Encoder cache across hosts: the producer (encoder host) saves embeddings in its pool;
 * the consumer (prefill host) pulls them, given only the ec_transfer_params, which name
 * the encoder host's address; every pulled byte is compared with the embedding.
 */
const EC_NODE = fileURLToPath(new URL('./fixtures/ec-node.ts', import.meta.url));
const MiB = 1 << 20;
const ITEMS = [
  ['img-a', MiB],
  ['img-b', 3 * MiB + 17],
  ['vid-c', 8 * MiB],
  ['tiny', 1],
] as const;

const CONFIGS: [string, (address: string) => TeConfigInput][] = [
  ['mooncake-tcp', (address) => ({ connector: 'mooncake-tcp', bindAddress: address })],
  [
    'mooncake-rdma (tcp;ofi_rxm)',
    (address) => ({
      connector: 'mooncake-rdma',
      bindAddress: address,
      transportOptions: { 'mooncake-rdma': { provider: 'tcp;ofi_rxm', connectTimeoutMs: 2000 } },
    }),
  ],
];

/** The consumer's `load` reply (fixtures/ec-node.ts): what arrived, what failed, and what arrived with the wrong bytes. */
interface LoadReply {
  loaded: string[];
  failed: { hash: string; code?: string }[];
  mismatches: string[];
}

for (const [name, config] of CONFIGS)
  testIf(test, netnsSupport(), `EC across hosts over ${name}: the prefill host pulls every item byte-exact from the encoder host`, async () => {
    await Cluster.with(['encoder', 'prefill'], async (c) => {
      const spec = (role: string, address: string) => ({ TE_NETNS_EC: JSON.stringify({ role, config: config(address) }) });
      const [producer, consumer] = await Promise.all([
        c.spawn('encoder', EC_NODE, { env: spec('producer', c.host('encoder').address) }),
        c.spawn('prefill', EC_NODE, { env: spec('consumer', c.host('prefill').address) }),
      ]);
      const params: Record<string, ECItemParams> = {};
      for (const [hash, length] of ITEMS) params[hash] = await producer.call<ECItemParams>('save', { hash, length });
      // The router hands the consumer the encoder host's address, nothing else.
      for (const p of Object.values(params)) assert.is(p.remote_host, c.host('encoder').address);
      const before = c.counters('prefill');
      const r = await consumer.call<LoadReply>('load', { params }, 30_000);
      assert.equal(r.loaded, ITEMS.map(([h]) => h).sort());
      assert.equal(r.failed, []);
      assert.equal(r.mismatches, []);
      assert.is((await producer.call<{ pulls: number; count: number }>('stats')).pulls, 1);
      const bytes = ITEMS.reduce((n, [, l]) => n + l, 0);
      assert.ok(c.counters('prefill').rx - before.rx >= bytes, "the embeddings crossed the prefill host's link");
    });
  });

test.run();
