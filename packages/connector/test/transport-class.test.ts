import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PLUGIN_API_VERSION, TRANSPORT_CLASSES, isTransferError, localityOf, validatePlugin, type TransportCapabilities } from '../src/index.js';

/*
 * Transport classes are declared by plugins: a well-known class ranks by its place in
 * TRANSPORT_CLASSES, a plugin's own class by the locality it declares.
 */
const plugin = (capabilities: Partial<TransportCapabilities> & Record<string, unknown>) => ({
  apiVersion: PLUGIN_API_VERSION,
  name: 'third-party',
  version: '1.0.0',
  capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: false, maxInFlight: 1, rawAddresses: false, ...capabilities },
  options: {},
  create: async () => {
    throw new Error('unused');
  },
});

function refusal(candidate: unknown): string {
  try {
    validatePlugin(candidate, 'the fixture');
  } catch (e) {
    assert.ok(isTransferError(e, 'PLUGIN_INVALID'), String(e));
    return (e as Error).message;
  }
  return '';
}

test('a plugin of its own class with a declared locality is accepted and ranked by it', () => {
  const p = validatePlugin(plugin({ class: 'cxl-pool', locality: 1.5 }), 'the fixture');
  assert.is(p.capabilities.class, 'cxl-pool');
  assert.is(localityOf(p.capabilities), 1.5);
  // Between nvlink (1) and same-host (2).
  assert.ok(localityOf({ class: 'nvlink' }) < localityOf(p.capabilities) && localityOf(p.capabilities) < localityOf({ class: 'same-host' }));
});

test('well-known classes rank by their place, a declared locality overrides it', () => {
  TRANSPORT_CLASSES.forEach((c, i) => assert.is(localityOf({ class: c }), i));
  assert.is(localityOf({ class: 'tcp', locality: 0.5 }), 0.5);
});

test('a class of its own without a locality, a malformed class or a bad locality is refused', () => {
  assert.match(refusal(plugin({ class: 'cxl-pool' })), /`capabilities\.class` must be one of .* declared with `capabilities\.locality`/);
  assert.match(refusal(plugin({ class: 'Not A Class', locality: 1 })), /`capabilities\.class` must be one of/);
  assert.match(refusal(plugin({ class: 'tcp', locality: -1 })), /`capabilities\.locality` must be a non-negative number/);
  assert.match(refusal(plugin({ class: 'tcp', locality: Number.NaN })), /`capabilities\.locality` must be a non-negative number/);
  assert.is(refusal(plugin({ class: 'tcp' })), '');
});

test.run();
