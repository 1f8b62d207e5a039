// The shared conformance suite between strict-pool barex engines (initiator here, target
// in a child process), on both loopback providers: the suite takes its memory from
// engine.allocateMemory, which barex serves from its pool.
import { transportConformance, type TargetProcess } from '@te/testkit';
import type { TransferEngine } from '@te/connector';
import plugin from '../src/index.js';
import { PROVIDERS, initiator, poolTarget } from './helpers.js';

for (const provider of PROVIDERS) {
  transportConformance({
    name: `${plugin.name} over ${provider} (strict-pool target in a child process)`,
    capabilities: plugin.capabilities,
    createInitiator: () => initiator(provider),
    async createPair() {
      const t: TargetProcess = await poolTarget(provider);
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
