import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The README's main job and `te bench`, end to end over mooncake-tcp between two processes.
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const te = join(root, 'packages', 'cli', 'dist', 'te.js');
const run = (args: string[], env: NodeJS.ProcessEnv = {}) => spawnSync(process.execPath, [te, ...args], { cwd: root, encoding: 'utf8', timeout: 120_000, env: { ...process.env, ...env } });

test('te demo moves a request\'s KV between two processes and verifies it', () => {
  const r = run(['demo', '--layers', '8', '--pages', '16', '--page-size', '8192']);
  assert.is(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /wrote 8 layers \(128 page writes, 8 notifications\)/);
  assert.match(r.stdout, /✔ verified: every byte landed/);
});

for (const op of ['write', 'read'] as const) {
  test(`te bench --loopback --verify --json (${op}) reports figures and a verified run`, () => {
    const r = run(['bench', '--loopback', '--verify', '--json', '--op', op, '--block-size', '64KiB', '--batch-size', '4', '--concurrency', '2', '--duration', '0.5']);
    assert.is(r.status, 0, r.stderr);
    const last = JSON.parse(r.stdout.trim().split('\n').pop()!);
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
      const r = run(['bench', '--plugin', plugin, '--loopback', '--verify', '--json', '--block-size', '256KiB', '--batch-size', '4', '--concurrency', '2', '--duration', '0.5'], { FI_PROVIDER: provider });
      assert.is(r.status, 0, r.stderr);
      const last = JSON.parse(r.stdout.trim().split('\n').pop()!);
      assert.is(last.plugin, plugin);
      assert.is(last.verified, true);
      assert.ok(last.requests > 0 && last.bytes === last.requests * 262144, JSON.stringify(last));
    });
  }
}

test('te bench without --verify says verified: false', () => {
  const r = run(['bench', '--loopback', '--json', '--block-size', '4KiB', '--batch-size', '16', '--duration', '0.3']);
  assert.is(r.status, 0, r.stderr);
  assert.is(JSON.parse(r.stdout.trim().split('\n').pop()!).verified, false);
});

test('te bench against a target that is not there fails with a typed error in time', () => {
  const started = Date.now();
  const r = run(['bench', '--target', '127.0.0.1:9', '--duration', '0.3', '--timeout', '1000']);
  assert.is(r.status, 1);
  assert.match(r.stderr, /No answer from 127\.0\.0\.1:9 .*\[TIMEOUT\]/);
  assert.ok(Date.now() - started < 30_000);
});

test('te bench --module-path loads a third-party plugin (an in-process one cannot reach another process: typed error)', () => {
  const r = run(['bench', '--loopback', '--plugin', 'example-memcpy', '--module-path', './test/fixtures/third-party-plugin', '--duration', '0.2']);
  assert.is(r.status, 1);
  assert.match(r.stderr, /\[example-memcpy\] no peer 127\.0\.0\.1:\d+ \[PEER_FAILED\]/);
});

test.run();
