import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_CONFIG, isTransferError, loadConfig, parseMetadataString, transportsOf, validateConfig, type TransferErrorCode } from '../src/index.js';

function expectError(fn: () => unknown, code: TransferErrorCode, message: RegExp): void {
  try {
    fn();
  } catch (e) {
    assert.ok(isTransferError(e, code), `expected ${code}, got ${String(e)}`);
    assert.match((e as Error).message, message);
    return;
  }
  assert.unreachable(`expected ${code}`);
}

test('minimal config gets the documented defaults', () => {
  const c = loadConfig({ json: { connector: 'mooncake-tcp' }, env: {} });
  assert.is(c.connector, 'mooncake-tcp');
  assert.is(c.role, DEFAULT_CONFIG.role);
  assert.equal(c.timeouts, DEFAULT_CONFIG.timeouts);
  assert.is(c.bindAddress, '127.0.0.1');
  assert.is(c.forceTcp, false);
});

test('file < inline JSON < environment < overrides', () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-config-'));
  const file = join(dir, 'te.json');
  writeFileSync(file, JSON.stringify({ connector: 'from-file', role: 'producer', timeouts: { transferMs: 1000, handshakeMs: 7 } }));
  const c = loadConfig({ file, json: '{"role":"consumer"}', env: { TE_TRANSFER_TIMEOUT_MS: '2000' }, overrides: { connector: 'from-code' } });
  assert.is(c.connector, 'from-code');
  assert.is(c.role, 'consumer');
  assert.is(c.timeouts.transferMs, 2000);
  assert.is(c.timeouts.handshakeMs, 7, 'nested objects merge field by field');
  const viaEnv = loadConfig({ env: { TE_CONFIG: file } });
  assert.is(viaEnv.connector, 'from-file');
});

test("vLLM's KVTransferConfig spelling is accepted", () => {
  const c = loadConfig({
    json: { kv_connector: 'mooncake-tcp', kv_role: 'kv_producer', kv_connector_module_path: './x.js', kv_connector_extra_config: { a: 1 } },
    env: {},
  });
  assert.is(c.connector, 'mooncake-tcp');
  assert.is(c.role, 'producer');
  assert.is(c.modulePath, './x.js');
  assert.equal(c.extra, { a: 1 });
  assert.is(loadConfig({ json: { ec_connector: 'x', ec_role: 'ec_consumer' }, env: {} }).role, 'consumer');
  assert.is(loadConfig({ json: { connector: 'x' }, env: { TE_ROLE: 'kv_consumer' } }).role, 'consumer');
});

test("vLLM's other fields pass through into extra instead of being refused", () => {
  const c = loadConfig({
    json: {
      kv_connector: 'mooncake-tcp',
      kv_role: 'kv_both',
      engine_id: 'e1',
      kv_rank: 0,
      kv_port: 14579,
      kv_buffer_device: 'cuda',
      kv_connector_extra_config: { a: 1 },
    },
    env: {},
  });
  assert.equal(c.extra, { engine_id: 'e1', kv_rank: 0, kv_port: 14579, kv_buffer_device: 'cuda', a: 1 });
});

test('Mooncake environment names are honoured', () => {
  const c = loadConfig({
    json: { connector: 'mooncake-tcp' },
    env: { MC_FORCE_TCP: '1', MC_TE_METRIC: 'true', MC_LOG_LEVEL: 'WARNING', MC_TCP_BIND_ADDRESS: '10.1.2.3', MC_INTRANODE_NVLINK: '1' },
  });
  assert.is(c.forceTcp, true);
  assert.is(c.metrics, true);
  assert.is(c.logLevel, 'warn');
  assert.is(c.bindAddress, '10.1.2.3');
  assert.equal(transportsOf(c), ['mooncake-tcp', 'mooncake-intra-nvlink']);
  assert.equal(transportsOf(loadConfig({ json: { connector: 'mooncake-rdma', transports: ['mooncake-tcp'] }, env: { MC_FORCE_MNNVL: 'on' } })), [
    'mooncake-rdma',
    'mooncake-tcp',
    'mooncake-nvlink',
  ]);
});

test('MC_FORCE_MNNVL with MC_INTRANODE_NVLINK is refused naming both', () => {
  expectError(
    () => loadConfig({ json: { connector: 'x' }, env: { MC_FORCE_MNNVL: '1', MC_INTRANODE_NVLINK: '1' } }),
    'CONFLICTING_ENV',
    /MC_FORCE_MNNVL and MC_INTRANODE_NVLINK/,
  );
  expectError(() => validateConfig({ connector: 'x', forceMnnvl: true, intranodeNvlink: true }), 'CONFLICTING_ENV', /MC_FORCE_MNNVL and MC_INTRANODE_NVLINK/);
  // Set to false, they do not conflict.
  assert.is(loadConfig({ json: { connector: 'x' }, env: { MC_FORCE_MNNVL: '0', MC_INTRANODE_NVLINK: '1' } }).intranodeNvlink, true);
});

const badValues: [string, Record<string, unknown>, Record<string, string>, RegExp][] = [
  ['missing connector', {}, {}, /Expected `connector` to name a transport plugin/],
  ['bad role', { connector: 'x', role: 'prefill' }, {}, /Expected `role` to be one of producer, consumer, both, got "prefill"/],
  ['negative timeout', { connector: 'x', timeouts: { transferMs: -1 } }, {}, /Expected `timeouts.transferMs` to be a positive integer.*got -1/],
  ['port too large', { connector: 'x', metadata: { port: 70000 } }, {}, /`metadata.port`.*no larger than 65535, got 70000/],
  ['unknown key', { connector: 'x', conector: 'y' }, {}, /Unknown config key `conector` \(did you mean `connector`\?\)/],
  // Before, the missing connector was named and the misspelling that caused it was not.
  ['misspelt required key', { conector: 'mooncake-tcp' }, {}, /^Unknown config key `conector` \(did you mean `connector`\?\)/],
  [
    'misspelt key, case',
    { transportoptions: {}, connector: 'x' },
    {},
    /Unknown config key `transportoptions` \(did you mean `transportOptions`\?\); known keys/,
  ],
  ['unknown key, nothing close', { connector: 'x', gpu: true }, {}, /^Unknown config key `gpu`; known keys: /],
  ['bad transports', { connector: 'x', transports: 'tcp' }, {}, /Expected `transports` to be a list of plugin names/],
  ['bad bind address', { connector: 'x', bindAddress: 'not an address!' }, {}, /Expected `bindAddress` to be an IPv4\/IPv6 address or a host name/],
  ['wildcard bind address', { connector: 'x', bindAddress: '0.0.0.0' }, {}, /peers cannot reach a wildcard address/],
  ['env bind address', { connector: 'x' }, { MC_TCP_BIND_ADDRESS: '300.1.1.1.1' }, /environment variable MC_TCP_BIND_ADDRESS to be an IPv4/],
  ['env boolean', { connector: 'x' }, { MC_FORCE_TCP: 'sure' }, /MC_FORCE_TCP to be a boolean/],
  ['env log level', { connector: 'x' }, { MC_LOG_LEVEL: 'loud' }, /MC_LOG_LEVEL to be one of/],
  ['env integer', { connector: 'x' }, { TE_HANDSHAKE_PORT: '12ab' }, /TE_HANDSHAKE_PORT to be an integer, got "12ab"/],
  ['registration bound of 0', { connector: 'x', timeouts: { registerMs: 0 } }, {}, /Expected `timeouts.registerMs` to be a positive integer.*got 0/],
  ['env registration bound', { connector: 'x' }, { TE_REGISTER_TIMEOUT_MS: '10m' }, /TE_REGISTER_TIMEOUT_MS to be an integer, got "10m"/],
  // Before, the engine read the variable itself: "abc" or "0" gave 5 s without a word, and
  // "1e-9" or "1e10" a line every millisecond (a timer below 1 ms, or past its limit).
  ['env metric interval', { connector: 'x' }, { TE_METRIC_INTERVAL_S: 'abc' }, /TE_METRIC_INTERVAL_S to be an integer, got "abc"/],
  ['env metric interval 1e-9', { connector: 'x' }, { TE_METRIC_INTERVAL_S: '1e-9' }, /TE_METRIC_INTERVAL_S to be an integer, got "1e-9"/],
  ['metric interval 0', { connector: 'x' }, { TE_METRIC_INTERVAL_S: '0' }, /Expected `metricIntervalS` to be an integer of seconds from 1 to 86400.*got 0/],
  [
    'metric interval 1e10',
    { connector: 'x', metricIntervalS: 1e10 },
    {},
    /Expected `metricIntervalS` to be an integer of seconds from 1 to 86400.*got 10000000000/,
  ],
];

test('metricIntervalS: 5 s by default, TE_METRIC_INTERVAL_S sets it', () => {
  assert.is(loadConfig({ json: { connector: 'x' }, env: {} }).metricIntervalS, 5);
  assert.is(loadConfig({ json: { connector: 'x' }, env: { TE_METRIC_INTERVAL_S: '60' } }).metricIntervalS, 60);
  assert.is(loadConfig({ json: { connector: 'x', metricIntervalS: 2 }, env: {} }).metricIntervalS, 2);
});

test('timeouts.registerMs: 10 minutes by default, TE_REGISTER_TIMEOUT_MS sets it', () => {
  assert.is(loadConfig({ json: { connector: 'x' }, env: {} }).timeouts.registerMs, 600_000);
  assert.is(loadConfig({ json: { connector: 'x' }, env: { TE_REGISTER_TIMEOUT_MS: '1500' } }).timeouts.registerMs, 1500);
});
for (const [name, json, env, message] of badValues) {
  test(`bad config value refused precisely: ${name}`, () => expectError(() => loadConfig({ json, env }), 'INVALID_CONFIG', message));
}

test('parseMetadataString refuses a value that is not a string as INVALID_CONFIG (was a TypeError reading trim)', () => {
  expectError(
    () => parseMetadataString(undefined as never),
    'INVALID_CONFIG',
    /Expected `metadata` to be "p2p" or "etcd:\/\/host:port\[,host:port\]", got undefined$/,
  );
  expectError(() => parseMetadataString(null as never, 'MC_METADATA_SERVER'), 'INVALID_CONFIG', /Expected MC_METADATA_SERVER to be .*, got null$/);
  assert.equal(parseMetadataString(' P2PHANDSHAKE '), { type: 'p2p' });
});

test('malformed JSON and unreadable files are INVALID_CONFIG', () => {
  expectError(() => loadConfig({ json: '{"connector":', env: {} }), 'INVALID_CONFIG', /config JSON is not valid JSON/);
  expectError(() => loadConfig({ json: '[1]', env: {} }), 'INVALID_CONFIG', /must hold a JSON object/);
  expectError(() => loadConfig({ file: '/nonexistent/te.json', env: {} }), 'INVALID_CONFIG', /Cannot read config file \/nonexistent\/te.json/);
});

// A JavaScript caller's null options, or a framework config that is not an object, met a
// TypeError or was taken as an empty config.
test('loadConfig refuses options and a framework config that are not objects', () => {
  expectError(() => loadConfig(null as never), 'INVALID_ARGUMENT', /Expected loadConfig's options to be an object \(\{ file\?, json\?, env\? \}\), got null/);
  expectError(() => loadConfig({ json: 5 as never, env: {} }), 'INVALID_CONFIG', /Expected a framework's transfer config to be an object, got number/);
  expectError(() => loadConfig({ json: [] as never, env: {} }), 'INVALID_CONFIG', /Expected a framework's transfer config to be an object, got an array/);
});

test.run();
