import { test } from 'uvu';
import { Cluster, netemSupport, testIf } from './harness/index.js';
import { runPD } from './fixtures/pd-flow.js';

/*
 * The PD flow over an impaired link: tc netem adds latency and loss on the decode host's
 * link, both directions. Kernels without sch_netem (minimal VM kernels) cannot impose
 * them; the test is then registered as skipped with that reason.
 */
testIf(
  test,
  netemSupport(),
  'PD TP 2→1 across hosts over mooncake-tcp with 20 ms latency and 1% loss each way on the decode link: every byte verified within the deadlines',
  async () => {
    await Cluster.with(['prefill', 'decode'], (c) =>
      runPD(c, (address) => ({ connector: 'mooncake-tcp', bindAddress: address }), { impair: { delayMs: 20, lossPercent: 1 } }),
    );
  },
);

test.run();
