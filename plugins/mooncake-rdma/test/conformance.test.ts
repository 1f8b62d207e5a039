// The shared transport conformance suite, initiator here and target in a child process,
// once per loopback provider (the child picks it with FI_PROVIDER, this process with the
// `provider` option, since libfabric reads FI_PROVIDER once per process).
import { transportConformance, type TargetProcess } from '@te/testkit';
import type { TransferEngine } from '@te/connector';
import plugin from '../src/index.js';
import { PROVIDERS, initiator, target } from './helpers.js';

for (const provider of PROVIDERS) {
  transportConformance({
    name: `${plugin.name} over ${provider} (target in a child process)`,
    capabilities: plugin.capabilities,
    createInitiator: () => initiator(provider),
    async createPair() {
      const t: TargetProcess = await target(provider);
      let i: TransferEngine;
      try {
        i = await initiator(provider);
      } catch (e) {
        await t.close();
        throw e;
      }
      return {
        initiator: i,
        target: t.segment,
        targetMemory: t,
        stall: () => t.stall(),
        resume: () => t.resume(),
        close: async () => {
          await i.close();
          await t.close();
        },
      };
    },
  }).run();
}
