import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PluginRegistry, createTransferEngine, isTransferError, loadConfig } from '@te/connector';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = join(here, 'fixtures', 'third-party-plugin');

test('a plugin outside the workspaces loads through modulePath (directory, file, relative)', async () => {
  const registry = new PluginRegistry({ builtins: false });
  for (const modulePath of [fixture, join(fixture, 'index.js'), `./${relative(process.cwd(), fixture)}`]) {
    const plugin = await registry.resolve({ connector: 'example-memcpy', modulePath });
    assert.is(plugin.name, 'example-memcpy', modulePath);
  }
});

test('an engine built from config with modulePath moves bytes through the third-party plugin', async () => {
  const config = loadConfig({ json: { connector: 'example-memcpy', modulePath: fixture }, env: {} });
  const a = await createTransferEngine(config);
  const b = await createTransferEngine(config);
  try {
    assert.equal(a.transports, ['example-memcpy']);
    const src = await a.registerMemory(new TextEncoder().encode('third-party bytes'));
    const dstBytes = new Uint8Array(17);
    const dst = await b.registerMemory(dstBytes);
    await a.write(b.segmentName, src.addr, dst.addr, 17);
    assert.is(new TextDecoder().decode(dstBytes), 'third-party bytes');
    try {
      await a.read(b.segmentName, src.addr, dst.addr, 17);
      assert.unreachable();
    } catch (e) {
      assert.ok(isTransferError(e, 'UNSUPPORTED_CAPABILITY'));
      assert.is((e as { plugin?: string }).plugin, 'example-memcpy');
    }
  } finally {
    await a.close();
    await b.close();
  }
});

test('modulePath via TE_MODULE_PATH in the environment', async () => {
  const config = loadConfig({ env: { TE_CONNECTOR: 'example-memcpy', TE_MODULE_PATH: fixture } });
  const e = await createTransferEngine(config);
  assert.equal(e.transports, ['example-memcpy']);
  await e.close();
});

test('raw host addresses on an engine whose transports cannot register them: the hint fits host memory', async () => {
  const engine = await createTransferEngine(loadConfig({ json: { connector: 'example-memcpy', modulePath: fixture }, env: {} }));
  try {
    const e = await engine.registerMemory({ addr: 0x7000_0000n, length: 4096 }).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'MEMORY_KIND_UNSUPPORTED'), String(e));
    assert.match((e as Error).message, /register a JS buffer/);
    assert.not.match((e as Error).message, /nvlink|cuda/i);
  } finally {
    await engine.close();
  }
});

test('the plugin in docs/plugins/writing-a-plugin.md is this fixture, byte for byte', () => {
  const doc = readFileSync(join(here, '..', 'docs', 'plugins', 'writing-a-plugin.md'), 'utf8');
  const block = doc.split('<!-- example-plugin -->\n```js\n')[1]?.split('```')[0];
  assert.ok(block, 'the example block is in the guide');
  assert.is(block, readFileSync(join(fixture, 'index.js'), 'utf8'));
});

test('a JS plugin registered after a native one adopts the address the first chose (the registration rule)', async () => {
  const registry = new PluginRegistry();
  registry.register('example-memcpy', () => import(join(fixture, 'index.js')));
  const config = { connector: 'mooncake-tcp', transports: ['example-memcpy'], bindAddress: '127.0.0.1' };
  const a = await createTransferEngine(config, { registry, env: {} });
  const b = await createTransferEngine(config, { registry, env: {} });
  try {
    assert.equal(a.transports, ['mooncake-tcp', 'example-memcpy']);
    const src = await a.registerMemory(new TextEncoder().encode('registered by both transports'));
    const dstBytes = new Uint8Array(29);
    const dst = await b.registerMemory(dstBytes);
    await a.write(b.segmentName, src.addr, dst.addr, 29);
    assert.is(new TextDecoder().decode(dstBytes), 'registered by both transports');
  } finally {
    await a.close();
    await b.close();
  }
});

test.run();
