import { PLUGIN_API_VERSION, definePlugin, type MemoryKind, type TransportClass, type TransportPlugin } from '@te/connector';
import { FakeFaults } from './faults.js';
import { FakeTransport } from './fake-transport.js';

export interface FakePluginOptions {
  /** Plugin name (default `test-fake`). Several fakes with different names model several transports. */
  name?: string;
  class?: TransportClass;
  memoryKinds?: MemoryKind[];
  read?: boolean;
  notifications?: boolean;
  apiVersion?: number;
}

export interface FakePlugin {
  plugin: TransportPlugin;
  /** Fault switches shared by every transport this plugin creates. */
  faults: FakeFaults;
}

/**
 * A fake transport plugin for engine tests: in-memory, same-process, named as a test
 * tool and never registered by default. Not a transport: it moves no bytes between processes.
 */
export function createFakePlugin(options: FakePluginOptions = {}): FakePlugin {
  const faults = new FakeFaults();
  const name = options.name ?? 'test-fake';
  const memoryKinds = options.memoryKinds ?? ['cpu'];
  const plugin = definePlugin({
    apiVersion: options.apiVersion ?? PLUGIN_API_VERSION,
    name,
    version: '0.0.0-test',
    capabilities: {
      class: options.class ?? 'test',
      memoryKinds,
      read: options.read ?? true,
      notifications: options.notifications ?? true,
      maxInFlight: 1024,
      // Raw addresses must come from allocFakeDeviceMemory.
      rawAddresses: memoryKinds.includes('cuda'),
    },
    options: {
      label: { type: 'string', default: 'fake', env: 'TE_FAKE_LABEL', description: 'Free text shown by describe(); exercises option parsing' },
    },
    probe: () => ({ available: true, details: { note: 'in-process test transport' } }),
    create: async (context) => new FakeTransport(name, context, faults),
  });
  return { plugin, faults };
}
