import { fileURLToPath } from 'node:url';
import { createTransferEngine } from '@te/connector';
import { compileWorkerScript, spawnTargetProcess, transportConformance } from '@te/testkit';
import plugin from '../src/index.js';

// The shared conformance suite, through the engine, with the target in another process.
const config = { connector: 'mooncake-tcp', timeouts: { transferMs: 10_000, handshakeMs: 5_000 } };

transportConformance({
  name: 'mooncake-tcp (two processes, loopback)',
  capabilities: plugin.capabilities,
  maxBytes: 8 << 20,
  createInitiator: () => createTransferEngine(config),
  async createPair() {
    const target = await spawnTargetProcess(await compileWorkerScript(fileURLToPath(new URL('./fixtures/conformance-target.ts', import.meta.url))), config);
    const initiator = await createTransferEngine(config);
    return {
      initiator,
      target: target.segment,
      targetMemory: target,
      stall: target.stall,
      resume: target.resume,
      close: async () => {
        await initiator.close();
        await target.close();
      },
    };
  },
}).run();
