import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { networkInterfaces } from 'node:os';
import { advertisedHost } from '../src/index.js';

test('an override wins; a concrete bind address is published as it is', () => {
  assert.is(advertisedHost('0.0.0.0', 'node7.example'), 'node7.example');
  assert.is(advertisedHost('10.1.2.3'), '10.1.2.3');
  assert.is(advertisedHost('::1'), '::1');
});

test("a wildcard bind publishes one of this machine's external IPv4 addresses, or loopback where it has none", () => {
  const external = Object.values(networkInterfaces())
    .flatMap((l) => l ?? [])
    .filter((a) => a.family === 'IPv4' && !a.internal)
    .map((a) => a.address);
  for (const bind of ['0.0.0.0', '::']) {
    const host = advertisedHost(bind);
    if (external.length === 0) assert.is(host, '127.0.0.1');
    else assert.ok(external.includes(host), `${host} is not among ${external.join(', ')}`);
  }
});

test.run();
