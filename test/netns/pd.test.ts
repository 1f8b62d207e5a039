import { test } from 'uvu';
import type { TeConfigInput } from '@te/connector';
import { Cluster, netnsSupport, testIf } from './harness/index.js';
import { runPD } from './fixtures/pd-flow.js';

/*
 * PD across hosts: two prefill ranks (attention TP 2) on one host, a decode rank (TP 1) on
 * another, each host a network namespace with its own address; the decode pulls nothing,
 * the prefill ranks write head slices into it over the link between them. Every byte of
 * the decode's memory is checked, and the link's counters show the KV crossed it.
 */
const support = netnsSupport();
const rdma = (address: string): TeConfigInput => ({
  connector: 'mooncake-rdma',
  bindAddress: address,
  transportOptions: { 'mooncake-rdma': { provider: 'tcp;ofi_rxm', connectTimeoutMs: 2000 } },
});

// As docs/deployment.md asks of a deployment across hosts: one shared secret (CURVE on the
// control plane, authenticated mooncake-tcp connections).
const SECRET = 'netns-test-secret-0123456789';

testIf(
  test,
  support,
  'PD TP 2→1 with head slicing across hosts over mooncake-tcp with the shared secret: every byte verified, the KV crossed the link',
  async () => {
    await Cluster.with(['prefill', 'decode'], (c) => runPD(c, (address) => ({ connector: 'mooncake-tcp', bindAddress: address, secret: SECRET })));
  },
);

testIf(test, support, 'PD TP 2→1 with head slicing across hosts over mooncake-rdma (libfabric tcp;ofi_rxm bound to the host address)', async () => {
  await Cluster.with(['prefill', 'decode'], (c) => runPD(c, rdma));
});

test.run();
