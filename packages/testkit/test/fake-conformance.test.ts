import { PluginRegistry, createTransferEngine } from '@te/connector';
import { LocalTargetMemory, createFakePlugin, transportConformance } from '../src/index.js';

// The fake transport must pass the same suite every real plugin runs.
const { plugin, faults } = createFakePlugin();

const registry = new PluginRegistry({ builtins: false });
registry.register(plugin.name, plugin);
const config = { connector: plugin.name };

transportConformance({
  name: 'test-fake (in-process)',
  capabilities: plugin.capabilities,
  createInitiator: () => createTransferEngine(config, { registry }),
  async createPair() {
    const initiator = await createTransferEngine(config, { registry });
    const target = await createTransferEngine(config, { registry });
    return {
      initiator,
      target: target.segmentName,
      targetMemory: new LocalTargetMemory(target),
      stall: async () => void (faults.neverComplete = true),
      resume: async () => void (faults.neverComplete = false),
      close: async () => {
        await initiator.close();
        await target.close();
      },
    };
  },
}).run();
