import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUILTIN_PLUGINS, PLUGIN_API_VERSION, PluginRegistry, isTransferError, type TransferErrorCode, type TransportPlugin } from '../src/index.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

async function expectError(p: Promise<unknown> | (() => unknown), code: TransferErrorCode, message: RegExp): Promise<Error> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    assert.ok(isTransferError(e, code), `expected ${code}, got ${String((e as Error)?.stack ?? e)}`);
    assert.match((e as Error).message, message);
    return e as Error;
  }
  assert.unreachable(`expected ${code}`);
  throw new Error('unreachable');
}

const plugin = (name: string, apiVersion = PLUGIN_API_VERSION): TransportPlugin => ({
  apiVersion,
  name,
  version: '1.0.0',
  capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: false, maxInFlight: 1, rawAddresses: false },
  options: {},
  create: async () => {
    throw new Error('unused');
  },
});

test('built-in names are known without loading anything', () => {
  const r = new PluginRegistry();
  for (const name of Object.keys(BUILTIN_PLUGINS)) assert.ok(r.has(name));
  assert.equal(r.names(), Object.keys(BUILTIN_PLUGINS).sort());
  assert.is(r.sourceOf('mooncake-tcp'), '@te/mooncake-tcp');
});

test('an unknown name lists the known names and how to add one', async () => {
  const r = new PluginRegistry();
  const e = await expectError(r.load('mooncake-tpc'), 'PLUGIN_UNKNOWN', /Unknown connector "mooncake-tpc"\. Known connectors: barex, mooncake-intra-nvlink/);
  assert.match(e.message, /modulePath/);
  assert.match(e.message, /registerPlugin/);
});

test('a duplicate name is refused', async () => {
  const r = new PluginRegistry();
  await expectError(
    () => r.register('mooncake-tcp', plugin('mooncake-tcp')),
    'PLUGIN_DUPLICATE',
    /"mooncake-tcp" is already registered \(provided by @te\/mooncake-tcp\)/,
  );
  r.register('mine', plugin('mine'));
  await expectError(() => r.register('mine', plugin('mine')), 'PLUGIN_DUPLICATE', /"mine" is already registered/);
});

// Before, register() took any name and any source: `register(undefined, undefined)` made
// has(undefined) true, and the mistake surfaced only at the first load, if ever (a name no
// plugin may declare can never load). resolve(undefined) and loadModulePath(undefined) threw
// TypeErrors.
test('register refuses a name no plugin may declare and a source that is not one; resolve and loadModulePath refuse junk', async () => {
  const r = new PluginRegistry({ builtins: false });
  for (const [name, shown] of [
    [undefined, 'undefined'],
    ['', '""'],
    ['Acme', '"Acme"'],
    ['has space', '"has space"'],
    ['-lead', '"-lead"'],
    [5, 'number'],
  ] as const)
    await expectError(
      () => r.register(name as never, plugin('x')),
      'INVALID_ARGUMENT',
      new RegExp(`^Expected a plugin name to be a lower-case identifier \\(.*\\), got ${shown.replace(/[$()*+.?[\\\]^{|}-]/g, '\\$&')}$`),
    );
  for (const [source, shown] of [
    [undefined, 'undefined'],
    [null, 'null'],
    [5, 'number'],
    ['', '""'],
  ] as const)
    await expectError(() => r.register('acme', source as never), 'INVALID_ARGUMENT', new RegExp(`^Expected plugin "acme"'s source to be .*, got ${shown}$`));
  assert.equal(r.names(), [], 'nothing was registered');
  r.register('acme.tcp_2', '@acme/tcp');
  r.register('acme-loader', async () => plugin('acme-loader'));
  assert.equal(r.names(), ['acme-loader', 'acme.tcp_2']);
  await expectError(r.resolve(undefined as never), 'INVALID_ARGUMENT', /^Expected a config with `connector` to resolve, got undefined$/);
  await expectError(r.loadModulePath(undefined as never), 'INVALID_CONFIG', /^Expected `modulePath` to be a package name or file path, got undefined$/);
  await expectError(r.loadModulePath(''), 'INVALID_CONFIG', /got ""$/);
});

test('plugins load lazily, once', async () => {
  const r = new PluginRegistry({ builtins: false });
  let loads = 0;
  r.register('lazy', async () => {
    loads++;
    return { default: plugin('lazy') };
  });
  assert.is(loads, 0);
  const [a, b] = await Promise.all([r.load('lazy'), r.load('lazy')]);
  assert.is(a, b);
  assert.is(loads, 1);
});

test('a plugin API version mismatch names the package and both versions', async () => {
  const r = new PluginRegistry({ builtins: false });
  const e = await expectError(r.loadModulePath(join(fixtures, 'plugin-api-v2.mjs')), 'PLUGIN_API_MISMATCH', /expected 1, got 2/);
  assert.match(e.message, /plugin-api-v2\.mjs/);
  assert.match(e.message, /future-transport/);
  r.register('old', plugin('old', 0));
  await expectError(r.load('old'), 'PLUGIN_API_MISMATCH', /expected 1, got 0/);
});

test('a plugin that fails to load lists what was tried', async () => {
  const r = new PluginRegistry({ builtins: false });
  const e = await expectError(
    r.loadModulePath(join(fixtures, 'plugin-throws.mjs')),
    'PLUGIN_LOAD_FAILED',
    /Tried:\n {2}- import file:.*plugin-throws\.mjs: native addon te_example\.node not found/,
  );
  assert.ok((e as { details?: { attempts?: unknown[] } }).details?.attempts?.length === 1);
  const pkg = await expectError(
    r.loadModulePath('te-no-such-package'),
    'PLUGIN_LOAD_FAILED',
    /Cannot load plugin module "te-no-such-package"\. Tried:\n {2}- resolve from .*\n {2}- import from @te\/connector/,
  );
  assert.ok(pkg);
});

test('a name whose package is not installed says which package to install', async () => {
  const r = new PluginRegistry({ builtins: false });
  r.register('ghost', '@te/ghost-transport');
  await expectError(
    r.load('ghost'),
    'PLUGIN_LOAD_FAILED',
    /Connector "ghost" is provided by @te\/ghost-transport.*npm install @te\/ghost-transport[\s\S]*Tried:/,
  );
});

test('an invalid plugin object is refused with every problem listed', async () => {
  const r = new PluginRegistry({ builtins: false });
  const e = await expectError(r.loadModulePath(join(fixtures, 'plugin-invalid.mjs')), 'PLUGIN_INVALID', /`name` must be a lower-case identifier/);
  for (const part of [
    '`version` must be a string',
    '`create` must be a function',
    '`capabilities.class` must be one of',
    '`capabilities.memoryKinds`',
    '`capabilities.read` must be a boolean',
  ]) {
    assert.ok(e.message.includes(part), `missing: ${part}`);
  }
});

test('modulePath loads CommonJS plugins and relative paths, and checks the name', async () => {
  const r = new PluginRegistry({ builtins: false, baseDir: fixtures });
  const p = await r.loadModulePath('./plugin-minimal.cjs');
  assert.is(p.name, 'minimal-cjs');
  assert.is((await r.resolve({ connector: 'minimal-cjs', modulePath: './plugin-minimal.cjs' })).name, 'minimal-cjs');
  await expectError(
    r.resolve({ connector: 'other', modulePath: './plugin-minimal.cjs' }),
    'PLUGIN_INVALID',
    /provides plugin "minimal-cjs", but the config names connector "other"/,
  );
});

test('a registered name must match the plugin it loads', async () => {
  const r = new PluginRegistry({ builtins: false });
  r.register('alias', plugin('real-name'));
  await expectError(r.load('alias'), 'PLUGIN_INVALID', /declares the name "real-name" but is registered as "alias"/);
});

test('a failed load is retried on the next call (the user may install the package)', async () => {
  const r = new PluginRegistry({ builtins: false });
  let attempt = 0;
  r.register('flaky', async () => {
    if (attempt++ === 0) throw new Error('not yet');
    return plugin('flaky');
  });
  await expectError(r.load('flaky'), 'PLUGIN_LOAD_FAILED', /not yet/);
  assert.is((await r.load('flaky')).name, 'flaky');
});

test.run();
