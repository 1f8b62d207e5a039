import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parseOptions, type Transport, type TransportPlugin } from '@te/connector';

/*
 * A closed transport must be garbage: an application that opens and closes transports (a
 * worker that reconnects, a test suite) must not keep every one it closed. The native object
 * held its JS callbacks, which close over the transport's JS object, which holds the native
 * object: a cycle through a persistent reference that the collector cannot break, so every
 * closed transport stayed alive with all it referenced. The cases cover every addon built on
 * the shared Node-API wrapper that runs without a GPU (the two CUDA addons need one).
 */
setFlagsFromString('--expose_gc');
const gc = runInNewContext('gc') as () => void;

// barex registers only its pool's memory unless told otherwise; a plain buffer is enough here.
const PLUGINS: Record<string, Record<string, unknown>> = {
  'mooncake-tcp': {},
  'mooncake-shm': {},
  'mooncake-rdma': {},
  barex: { allowExternalMemory: true },
  'mooncake-wire': {},
};

/** Creates a transport, moves its memory through a registration, closes it; returns a weak reference to it. */
async function closedTransport(name: string): Promise<WeakRef<Transport>> {
  const plugin = ((await import(`@te/${name}`)) as { default: TransportPlugin }).default;
  const transport = await plugin.create(
    { segmentName: `collected-${process.pid}`, epoch: 5n, bindAddress: '127.0.0.1', connectTimeoutMs: 3000, env: {}, log: () => {} },
    parseOptions(plugin.options, PLUGINS[name]!, {}, plugin.name),
  );
  const buffer = new Uint8Array(4096);
  const region = await transport.registerMemory({ buffer, length: 4096n, device: 'cpu', remoteAccess: true });
  await transport.unregisterMemory(region.addr);
  await transport.close();
  return new WeakRef(transport);
}

for (const name of Object.keys(PLUGINS)) {
  test(`a closed ${name} transport is collected`, async () => {
    const ref = await closedTransport(name);
    // A few turns of the loop between collections: what close() left queued (the bridge's
    // handle, the close worker) is released on the way.
    for (let i = 0; i < 20 && ref.deref() !== undefined; i++) {
      await new Promise((r) => setTimeout(r, 10));
      gc();
    }
    assert.is(ref.deref(), undefined, `the closed ${name} transport is still reachable after 20 collections`);
  });
}

test.run();
