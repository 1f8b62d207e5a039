import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PLUGIN_API_VERSION, PluginRegistry, createTransferEngine, definePlugin, type AllocatedMemory, type TransportPlugin } from '@te/connector';
import { FakeFaults, FakeTransport, fakeAddressOf } from '../src/index.js';

/*
 * engine.allocateMemory with two transports that both allocate: one whose allocator only
 * speeds transfers up, listed first, and one that moves nothing but its own memory (a
 * pre-registered pool). The second must be asked, whatever the order: memory from the
 * first allocator could not be moved by it. Fake transports: this is the engine's choice.
 */
const handedOut: string[] = [];

function allocatingPlugin(name: string, ownMemoryOnly: boolean): TransportPlugin {
  const faults = new FakeFaults();
  return definePlugin({
    apiVersion: PLUGIN_API_VERSION,
    name,
    version: '0.0.0-test',
    capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: true, maxInFlight: 64, rawAddresses: false, ownMemoryOnly },
    options: {},
    probe: () => ({ available: true }),
    create: async (context) =>
      Object.assign(new FakeTransport(name, context, faults), {
        async allocateMemory(length: bigint): Promise<AllocatedMemory> {
          handedOut.push(name);
          const buffer = new Uint8Array(Number(length));
          return { addr: fakeAddressOf(buffer), length, buffer };
        },
        async freeMemory(): Promise<void> {},
      }),
  });
}

async function allocatorOf(plugins: TransportPlugin[]): Promise<string> {
  const registry = new PluginRegistry({ builtins: false });
  for (const p of plugins) registry.register(p.name, p);
  const [first, ...rest] = plugins.map((p) => p.name);
  const engine = await createTransferEngine({ connector: first!, transports: rest }, { registry });
  try {
    handedOut.length = 0;
    const a = await engine.allocateMemory(4096);
    assert.is(a.buffer?.byteLength, 4096);
    await engine.freeMemory(a);
    return handedOut.join(',');
  } finally {
    await engine.close();
  }
}

test('the transport that moves only its own memory allocates, listed first or last', async () => {
  const speedup = allocatingPlugin('alloc-speedup', false);
  const poolOnly = allocatingPlugin('alloc-pool-only', true);
  assert.is(await allocatorOf([speedup, poolOnly]), 'alloc-pool-only');
  assert.is(await allocatorOf([poolOnly, speedup]), 'alloc-pool-only');
});

test('without such a transport the first allocator listed is asked', async () => {
  assert.is(await allocatorOf([allocatingPlugin('alloc-a', false), allocatingPlugin('alloc-b', false)]), 'alloc-a');
});

test('a plugin whose ownMemoryOnly is not a boolean is refused as invalid', async () => {
  const good = allocatingPlugin('alloc-bad', false);
  const registry = new PluginRegistry({ builtins: false });
  registry.register('alloc-bad', { ...good, capabilities: { ...good.capabilities, ownMemoryOnly: 'yes' as unknown as boolean } });
  try {
    await createTransferEngine({ connector: 'alloc-bad' }, { registry });
    assert.unreachable('an invalid capability was accepted');
  } catch (e) {
    assert.is((e as { code?: string }).code, 'PLUGIN_INVALID');
    assert.match((e as Error).message, /ownMemoryOnly/);
  }
});

test.run();
