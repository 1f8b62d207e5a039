import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { ConfigInputSchema, PLUGIN_API_VERSION, definePlugin, isTransferError, validatePlugin } from '../src/index.js';

test('docs/config.schema.json is generated from the schema validateConfig uses (run scripts/config-schema.mjs when this fails)', () => {
  const published = JSON.parse(readFileSync(new URL('../../../docs/config.schema.json', import.meta.url), 'utf8'));
  const current = JSON.parse(JSON.stringify({ $schema: 'https://json-schema.org/draft/2020-12/schema', ...ConfigInputSchema }));
  assert.equal(published, current);
});

const plugin = (options: Record<string, unknown>) => ({
  apiVersion: PLUGIN_API_VERSION,
  name: 'opts',
  version: '1.0.0',
  capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: false, maxInFlight: 1, rawAddresses: false },
  options,
  create: async () => {
    throw new Error('not used');
  },
});

test('validatePlugin checks option specs: a wrong type, a mistyped default, a default out of bounds', () => {
  const bad: [string, Record<string, unknown>][] = [
    ['unknown type', { lanes: { type: 'int', description: 'lanes' } }],
    ['default of the wrong type', { lanes: { type: 'integer', default: '4', description: 'lanes' } }],
    ['default out of bounds', { lanes: { type: 'integer', default: 99, max: 8, description: 'lanes' } }],
    ['enum default not a value', { mode: { type: 'enum', values: ['a', 'b'], default: 'c', description: 'mode' } }],
    ['lower-case env name', { lanes: { type: 'integer', env: 'te_lanes', description: 'lanes' } }],
    ['no description', { lanes: { type: 'integer' } }],
  ];
  for (const [what, options] of bad) {
    try {
      validatePlugin(plugin(options), 'test plugin');
      assert.unreachable(what);
    } catch (e) {
      assert.ok(isTransferError(e, 'PLUGIN_INVALID'), `${what}: ${String(e)}`);
      assert.match((e as Error).message, /option `(lanes|mode)`/, what);
    }
  }
  assert.ok(
    validatePlugin(definePlugin(plugin({ lanes: { type: 'integer', default: 4, min: 1, max: 8, env: 'TE_LANES', description: 'lanes' } }) as never), 'ok'),
  );
});

test.run();
