import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { lastJsonLine, loopbackBenchArgs, runNode, te } from './fixtures/te-cli.js';

// The README's main job and `te bench`, end to end over mooncake-tcp between two processes.
const run = (args: string[], env: NodeJS.ProcessEnv = {}) => runNode([te, ...args], { env });

test('te demo (as the README runs it, human output) exits 0 only when every request verified', () => {
  const r = run(['demo', '--requests', '4', '--layers', '8']);
  assert.is(r.status, 0, r.stdout + r.stderr);
  // One table row per request, each marked verified by the decode (the exit code says the same).
  const rows = r.stdout
    // eslint-disable-next-line no-control-regex -- terminal colour codes start with ESC
    .replace(/\x1b\[[0-9;]*m/g, '')
    .split('\n')
    .filter((l) => /^\s+\d+\s+[\d.]+\s/.test(l));
  assert.is(rows.length, 4, r.stdout);
  assert.ok(
    rows.every((l) => l.trimEnd().endsWith('✔')),
    r.stdout,
  );
});

for (const op of ['write', 'read'] as const) {
  test(`te bench --loopback --verify --json (${op}) reports figures and a verified run`, () => {
    const r = run(loopbackBenchArgs(op, 0.5));
    assert.is(r.status, 0, r.stderr);
    const last = lastJsonLine(r.stdout);
    assert.is(last.verified, true);
    assert.is(last.op, op);
    assert.ok(last.bytesPerSecond > 0 && last.requestsPerSecond > 0, JSON.stringify(last));
    assert.ok(last.p50Us > 0 && last.p99Us >= last.p50Us);
    assert.is(last.bytes, last.requests * 65536);
  });
}

// The libfabric plugins over both loopback providers, two processes, every byte checked.
for (const plugin of ['mooncake-rdma', 'barex']) {
  for (const provider of ['tcp;ofi_rxm', 'sockets']) {
    test(`te bench --plugin ${plugin} --loopback --verify over FI_PROVIDER=${provider}`, () => {
      const r = run(
        [
          'bench',
          '--plugin',
          plugin,
          '--loopback',
          '--verify',
          '--json',
          '--block-size',
          '256KiB',
          '--batch-size',
          '4',
          '--concurrency',
          '2',
          '--duration',
          '0.5',
        ],
        { FI_PROVIDER: provider },
      );
      assert.is(r.status, 0, r.stderr);
      const last = lastJsonLine(r.stdout);
      assert.is(last.plugin, plugin);
      assert.is(last.verified, true);
      assert.ok(last.requests > 0 && last.bytes === last.requests * 262144, JSON.stringify(last));
    });
  }
}

test('te bench without --verify says verified: false', () => {
  const r = run(['bench', '--loopback', '--json', '--block-size', '4KiB', '--batch-size', '16', '--duration', '0.3']);
  assert.is(r.status, 0, r.stderr);
  assert.is(lastJsonLine(r.stdout).verified, false);
});

test('te bench against a target that is not there fails at once with PEER_UNREACHABLE', () => {
  const started = Date.now();
  const r = run(['bench', '--target', '127.0.0.1:9', '--duration', '0.3', '--timeout', '10000']);
  assert.is(r.status, 1);
  assert.match(r.stderr, /127\.0\.0\.1:9 refused the connection.*\[PEER_UNREACHABLE\]/);
  assert.ok(Date.now() - started < 8_000, 'well inside the 10 s deadline');
});

test('te bench --module-path loads a third-party plugin (an in-process one cannot reach another process: typed error)', () => {
  const r = run(['bench', '--loopback', '--plugin', 'example-memcpy', '--module-path', './test/fixtures/third-party-plugin', '--duration', '0.2']);
  assert.is(r.status, 1);
  assert.match(r.stderr, /\[example-memcpy\] no peer 127\.0\.0\.1:\d+ \[PEER_FAILED\]/);
});

test.run();
