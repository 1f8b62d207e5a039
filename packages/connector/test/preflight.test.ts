// preflight(): what an engine would find at start, tried for real: the control endpoint bound
// on the configured address and port (and released), etcd asked over gRPC (a real etcd, or a
// port where none listens), and engines started with the same configs failing the same way.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { networkInterfaces } from 'node:os';
import { ControlServer, createTransferEngine, preflight, validateConfig, type PreflightCheck, type TeConfigInput } from '../src/index.js';
import { etcdCases, freePort } from './fixtures/etcd-harness.js';

// A documentation address (RFC 5737) no interface of this machine has (some virtual
// networks do use these ranges, so the test picks one that is not taken here).
const local = new Set(Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address)));
const FOREIGN_ADDRESS = ['203.0.113.77', '198.51.100.77', '192.0.2.77'].find((a) => !local.has(a))!;

const config = (input: Partial<TeConfigInput> = {}) => validateConfig({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1', ...input });

function only(checks: PreflightCheck[], name: PreflightCheck['name']): PreflightCheck {
  const found = checks.filter((c) => c.name === name);
  assert.is(found.length, 1, `one ${name} check in ${JSON.stringify(checks)}`);
  return found[0]!;
}

/** The code an engine's start fails with, or 'OK' (the engine is closed). */
async function startCode(input: Partial<TeConfigInput>, env: NodeJS.ProcessEnv = {}): Promise<string> {
  try {
    const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1', ...input }, { env });
    await engine.close();
    return 'OK';
  } catch (e) {
    return (e as { code?: string }).code ?? String(e);
  }
}

test('p2p metadata on a local address: the plugins and the bind pass, and the port is released', async () => {
  const port = await freePort();
  const checks = await preflight(config({ metadata: { type: 'p2p', port } }), { env: {} });
  assert.equal(
    checks.map((c) => [c.name, c.ok]),
    [
      ['plugins', true],
      ['bind', true],
    ],
    'no etcd check without etcd metadata',
  );
  assert.match(only(checks, 'plugins').detail, 'mooncake-tcp loaded');
  const bind = only(checks, 'bind');
  assert.ok(bind.ok, bind.detail);
  assert.is(bind.code, undefined);
  assert.match(bind.detail, `127.0.0.1:${port}`);
  // The port is free again: a control endpoint binds it (bind() waits out a port closing).
  const server = new ControlServer();
  try {
    assert.is(await server.bind('127.0.0.1', port), `127.0.0.1:${port}`);
  } finally {
    await server.close();
  }
});

test("a plugin option the environment sets out of range: the plugins check fails as the engine's start does, naming the variable", async () => {
  const env = { TE_TCP_WINDOW_BYTES: '5' };
  const plugins = only(await preflight(config(), { env }), 'plugins');
  assert.not.ok(plugins.ok);
  assert.is(plugins.code, 'INVALID_CONFIG');
  assert.match(plugins.detail, 'TE_TCP_WINDOW_BYTES');
  assert.match(plugins.detail, '[mooncake-tcp]');
  assert.is(await startCode({}, env), 'INVALID_CONFIG');
  assert.ok(only(await preflight(config(), { env: {} }), 'plugins').ok, 'the same config without the variable passes');
});

test('an unknown option in transportOptions, and the transport MC_FORCE_TCP adds: checked as the engine loads them', async () => {
  const typo = only(await preflight(config({ transportOptions: { 'mooncake-tcp': { windowByte: 1 << 20 } } }), { env: {} }), 'plugins');
  assert.not.ok(typo.ok);
  assert.is(typo.code, 'INVALID_CONFIG');
  assert.match(typo.detail, 'Unknown option `windowByte`');
  const forced = only(await preflight(config({ connector: 'mooncake-shm', forceTcp: true }), { env: {} }), 'plugins');
  assert.ok(forced.ok, forced.detail);
  assert.match(forced.detail, 'mooncake-shm, mooncake-tcp loaded');
});

test('an address no interface of this machine has: the bind fails INVALID_CONFIG and lists the addresses there are', async () => {
  const bind = only(await preflight(config({ bindAddress: FOREIGN_ADDRESS })), 'bind');
  assert.not.ok(bind.ok);
  assert.is(bind.code, 'INVALID_CONFIG');
  assert.match(bind.detail, `${FOREIGN_ADDRESS} is not an address of this machine`);
  assert.match(bind.detail, /its addresses: .*127\.0\.0\.1/);
  assert.match(bind.detail, 'MC_TCP_BIND_ADDRESS');
  assert.is(await startCode({ bindAddress: FOREIGN_ADDRESS }), 'INVALID_CONFIG', 'an engine with this config does not start either');
});

test('a handshake port another process holds: the bind fails INVALID_CONFIG naming the port', async () => {
  const holder = new ControlServer();
  const endpoint = await holder.bind('127.0.0.1', 0);
  const port = Number(endpoint.split(':')[1]);
  try {
    const bind = only(await preflight(config({ metadata: { type: 'p2p', port } })), 'bind');
    assert.not.ok(bind.ok);
    assert.is(bind.code, 'INVALID_CONFIG');
    assert.match(bind.detail, `port ${port} is held by another process`);
    assert.match(bind.detail, 'TE_HANDSHAKE_PORT');
    assert.is(await startCode({ metadata: { type: 'p2p', port } }), 'INVALID_CONFIG');
  } finally {
    await holder.close();
  }
});

test('a config that does not validate is refused as the engine refuses it; an unvalidated input that does is checked', async () => {
  try {
    await preflight({ connector: 'mooncake-tcp', bindAddress: '0.0.0.0' });
    assert.unreachable('a wildcard bind address passed');
  } catch (e) {
    assert.is((e as { code?: string }).code, 'INVALID_CONFIG');
    assert.match((e as Error).message, 'wildcard');
  }
  const checks = await preflight({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
  assert.ok(
    checks.every((c) => c.ok),
    JSON.stringify(checks),
  );
});

test('etcd metadata where no etcd listens: PEER_UNREACHABLE naming the endpoint, within the handshake deadline', async () => {
  const port = await freePort();
  const t0 = Date.now();
  const checks = await preflight(config({ metadata: `etcd://127.0.0.1:${port}`, timeouts: { handshakeMs: 1500 } }));
  const ms = Date.now() - t0;
  assert.ok(only(checks, 'bind').ok, 'the bind is checked as well');
  const etcd = only(checks, 'metadata');
  assert.not.ok(etcd.ok);
  assert.is(etcd.code, 'PEER_UNREACHABLE');
  assert.match(etcd.detail, `etcd at 127.0.0.1:${port}`);
  assert.ok(ms < 5000, `${ms} ms`);
});

const { etcdTest, suite } = etcdCases();

etcdTest('a real etcd: the check passes, counts the registered segments, and writes no key', async () => {
  const prefix = `preflight-${process.pid}`;
  const input = config({ metadata: { type: 'etcd', endpoints: [suite.etcd().endpoint], prefix }, timeouts: { handshakeMs: 3000 } });
  const before = only(await preflight(input), 'metadata');
  assert.ok(before.ok, before.detail);
  assert.match(before.detail, `0 segment(s) registered under "${prefix}"`);
  assert.equal(await suite.etcd().keys(`${prefix}/`), [], 'preflight wrote nothing');
  await suite.engine(prefix);
  const after = only(await preflight(input), 'metadata');
  assert.ok(after.ok, after.detail);
  assert.match(after.detail, `1 segment(s) registered under "${prefix}"`);
});

test.run();
