import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeTransferEngine, defaultRegistry, getTransferEngine, hasTransferEngine, initTransferEngine, isTransferError } from '@te/connector';
import { createFakePlugin, pattern } from '@te/testkit';
import { createRequire } from 'node:module';

const { plugin } = createFakePlugin({ name: 'shared-fake' });
defaultRegistry().register(plugin.name, plugin);
const config = { connector: plugin.name, timeouts: { transferMs: 5000 } };

test.after.each(async () => {
  await closeTransferEngine();
});

test('getTransferEngine before init is ENGINE_NOT_INITIALIZED', async () => {
  assert.not.ok(hasTransferEngine());
  try {
    await getTransferEngine();
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ENGINE_NOT_INITIALIZED'), String(e));
    assert.match((e as Error).message, /call initTransferEngine\(config\) first/);
  }
});

test('init twice with the same config returns the same engine, even concurrently', async () => {
  const [a, b] = await Promise.all([initTransferEngine(config), initTransferEngine({ ...config })]);
  assert.is(a, b);
  assert.is(await getTransferEngine(), a);
  assert.is(await initTransferEngine(config), a);
});

test('init with a different config fails and names the differing fields', async () => {
  await initTransferEngine(config);
  try {
    await initTransferEngine({ ...config, timeouts: { transferMs: 9000 } });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ENGINE_CONFIG_MISMATCH'), String(e));
    assert.match((e as Error).message, /differs in: timeouts/);
  }
});

test('KV, EC and offload users of the shared engine see one registration and one endpoint', async () => {
  // Three independent "users", as separate modules would be, each asking for the engine.
  const kvUser = async () => (await initTransferEngine(config)).registerMemory(pattern(4096, 1));
  const ecUser = async () => (await getTransferEngine()).registeredMemory();
  const offloadUser = async () => (await getTransferEngine()).descriptor();
  const handle = await kvUser();
  const seenByEc = await ecUser();
  const descriptor = await offloadUser();
  assert.equal(
    seenByEc.map((m) => m.addr),
    [handle.addr],
  );
  assert.equal(
    descriptor.buffers.map((b) => b.addr),
    [handle.addr],
  );
  assert.is(descriptor.name, (await getTransferEngine()).segmentName);
  try {
    await (await getTransferEngine()).registerMemory({ addr: handle.addr, length: 16n });
    assert.unreachable('a second user registering the same memory is an overlap');
  } catch (e) {
    assert.ok(isTransferError(e, 'MEMORY_OVERLAP'), String(e));
  }
});

test('the CommonJS build shares the engine created through ESM', async () => {
  const esm = await initTransferEngine(config);
  const require = createRequire(import.meta.url);
  const cjs = require('@te/connector') as typeof import('@te/connector');
  assert.is(await cjs.getTransferEngine(), esm);
  try {
    await cjs.initTransferEngine({ ...config, timeouts: { transferMs: 1234 } });
    assert.unreachable();
  } catch (e) {
    assert.ok(e instanceof (await import('@te/connector')).TransferError, 'CJS error is an instance of the ESM class');
    assert.is((e as { code: string }).code, 'ENGINE_CONFIG_MISMATCH');
  }
});

test('role and extra may differ between users of one engine (KV producer and EC consumer)', async () => {
  const kv = await initTransferEngine({ ...config, role: 'producer', extra: { kv: true } });
  const ec = await initTransferEngine({ ...config, role: 'consumer', extra: { ec: true } });
  assert.is(kv, ec);
});

test('an engine closed directly is replaced by the next init', async () => {
  const a = await initTransferEngine(config);
  await a.close();
  const b = await initTransferEngine(config);
  assert.is.not(a, b);
  assert.not.ok(b.closed);
  assert.is(await getTransferEngine(), b);
});

test('after close, a new engine can be created; the old one refuses work', async () => {
  const a = await initTransferEngine(config);
  await closeTransferEngine();
  try {
    await a.registerMemory(new Uint8Array(16));
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'ENGINE_CLOSED'));
  }
  const b = await initTransferEngine({ ...config, role: 'consumer' });
  assert.is.not(a, b);
});

test('a bad config is rejected by init and leaves no engine behind', async () => {
  try {
    await initTransferEngine({ connector: plugin.name, role: 'decoder' as never });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'INVALID_CONFIG'));
  }
  assert.not.ok(hasTransferEngine());
  try {
    await initTransferEngine({ connector: 'no-such-connector' });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'PLUGIN_UNKNOWN'));
  }
  assert.not.ok(hasTransferEngine());
});

test.run();
