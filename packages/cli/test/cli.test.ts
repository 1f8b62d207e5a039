import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'te.js');
const failsInOneWorker = fileURLToPath(new URL('./fixtures/fails-in-one-worker.mjs', import.meta.url));
const neverLoads = fileURLToPath(new URL('./fixtures/never-loads.mjs', import.meta.url));
const run = (args: string[], env: NodeJS.ProcessEnv = {}) => {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(MC_|TE_)/.test(k)));
  return spawnSync(process.execPath, [te, ...args], { encoding: 'utf8', env: { ...clean, ...env }, timeout: 60_000 });
};

test('doctor --json lists every built-in plugin with its package', () => {
  const r = run(['doctor', '--json']);
  const report = JSON.parse(r.stdout.trim().split('\n').pop()!);
  assert.equal(report.plugins.map((p: { name: string }) => p.name).slice(0, 5), [
    'mooncake-tcp',
    'mooncake-rdma',
    'mooncake-nvlink',
    'mooncake-intra-nvlink',
    'barex',
  ]);
  for (const p of report.plugins) assert.ok(p.loaded || typeof p.error === 'string', `${p.name} says why it does not load`);
  assert.is(report.config.connector, 'mooncake-tcp');
  assert.equal(
    report.checks.map((c: { name: string; ok: boolean }) => [c.name, c.ok]),
    [
      ['plugins', true],
      ['bind', true],
    ],
    'the default config starts here; p2p metadata needs no etcd check',
  );
});

test('doctor binds as an engine would: an address of another machine fails it, and says which addresses there are', () => {
  // A documentation address (RFC 5737) that no interface of this machine has.
  const local = new Set(Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address)));
  const foreign = ['203.0.113.77', '198.51.100.77', '192.0.2.77'].find((a) => !local.has(a))!;
  const env = { MC_TCP_BIND_ADDRESS: foreign, NO_COLOR: '1' };
  const r = run(['doctor'], env);
  assert.is(r.status, 1);
  assert.match(
    r.stdout,
    new RegExp(`✘ bind {2}INVALID_CONFIG: .*${foreign.replace(/\./g, '\\.')} is not an address of this machine \\(its addresses: .*127\\.0\\.0\\.1`),
  );
  const json = run(['doctor', '--json'], env);
  assert.is(json.status, 1);
  const report = JSON.parse(json.stdout.trim().split('\n').pop()!);
  assert.is(report.ok, false);
  assert.equal(
    report.checks.map((c: { name: string; ok: boolean; code?: string }) => [c.name, c.ok, c.code]),
    [
      ['plugins', true, undefined],
      ['bind', false, 'INVALID_CONFIG'],
    ],
  );
});

test("doctor parses the plugins' options as an engine would, and lists the plugins' variables that are set", () => {
  const r = run(['doctor'], { TE_TCP_WINDOW_BYTES: '5', NO_COLOR: '1' });
  assert.is(r.status, 1);
  assert.match(
    r.stdout,
    /✘ plugins {2}INVALID_CONFIG: \[mooncake-tcp\] Expected option `windowBytes` .* got 5 \(from environment variable TE_TCP_WINDOW_BYTES\)/,
  );
  assert.match(r.stdout, /environment: TE_TCP_WINDOW_BYTES=5/);
});

test('doctor exits non-zero on contradictory environment and names both variables', () => {
  const r = run(['doctor'], { MC_FORCE_MNNVL: '1', MC_INTRANODE_NVLINK: 'true' });
  assert.is(r.status, 1);
  assert.match(r.stdout, /CONFLICTING_ENV: MC_FORCE_MNNVL and MC_INTRANODE_NVLINK are both set/);
});

test('doctor exits non-zero on a bad value and says which', () => {
  const r = run(['doctor'], { MC_TCP_BIND_ADDRESS: '0.0.0.0' });
  assert.is(r.status, 1);
  assert.match(r.stdout, /INVALID_CONFIG: .*MC_TCP_BIND_ADDRESS is 0\.0\.0\.0: peers cannot reach a wildcard address/);
});

test('doctor names a misspelt variable and the one it most likely meant, and leaves names it reads or cannot place alone', () => {
  // TE_TCP_IO_THREADS is a plugin option, TE_KV_CHECKSUMS the runtime's, TE_MOONCAKE_TCP_ADDON the
  // addon's location; TE_SOMETHING_ELSE is near none of them.
  const env = {
    TE_HANDSHAKE_PROT: '7000',
    TE_SECRETT: 'abcdefghijklmnop',
    TE_TCP_IO_THREADS: '2',
    TE_KV_CHECKSUMS: '1',
    TE_MOONCAKE_TCP_ADDON: '',
    TE_SOMETHING_ELSE: '1',
    NO_COLOR: '1',
  };
  const r = run(['doctor'], env);
  assert.is(r.status, 1, r.stdout);
  assert.match(r.stdout, /✘ environment {2}TE_HANDSHAKE_PROT is set, but te reads no such variable: did you mean TE_HANDSHAKE_PORT\?/);
  assert.match(r.stdout, /✘ environment {2}TE_SECRETT is set, but te reads no such variable: did you mean TE_SECRET\?/);
  const report = JSON.parse(run(['doctor', '--json'], env).stdout.trim().split('\n').pop()!);
  assert.is(report.ok, false);
  assert.equal(report.unread, [
    { name: 'TE_HANDSHAKE_PROT', meant: 'TE_HANDSHAKE_PORT' },
    { name: 'TE_SECRETT', meant: 'TE_SECRET' },
  ]);
  const clean = run(['doctor', '--json'], { TE_TCP_IO_THREADS: '2', TE_KV_CHECKSUMS: '1', TE_SOMETHING_ELSE: '1' });
  assert.is(clean.status, 0, clean.stdout);
  assert.equal(JSON.parse(clean.stdout.trim().split('\n').pop()!).unread, []);
});

test('doctor reports an unknown configured connector', () => {
  const r = run(['doctor', '--json'], { TE_CONNECTOR: 'warp-drive' });
  const report = JSON.parse(r.stdout);
  assert.is(r.status, 1);
  assert.is(report.ok, false);
  assert.is(report.config.connector, 'warp-drive');
});

const usage: [string[], RegExp][] = [
  [['bench', '--loopback', '--op', 'copy'], /Expected --op to be write or read, got "copy"/],
  [['bench', '--loopback', '--block-size', '12 parsecs'], /--block-size: Expected a size like 4096, 64k or 1MiB/],
  [['bench', '--loopback', '--batch-size', '0'], /Expected --batch-size to be an integer from 1 to 1000000, got "0"/],
  [['bench', '--loopback', '--duration', '-3'], /Expected --duration to be seconds/],
  [['bench'], /Give --target <host:port> of a running `te bench --mode target`, or --loopback/],
  [['bench', '--loopback', '--block-size', '1g', '--batch-size', '8'], /keep it at or under 4 GiB/],
  [['bench', '--loopback', '--option', 'novalue'], /Expected --option key=value, got "novalue"/],
  // Refused by the command-line parser itself: these exited 1 before, unlike te's own refusals.
  [['bench', '--loopback', '--bogus'], /error: unknown option '--bogus'/],
  [['bench', '--loopback', '--block-size'], /error: option '--block-size <bytes>' argument missing/],
  [['bench', 'pd', '--checksums', 'sometimes'], /error: option '--checksums <mode>' argument 'sometimes' is invalid/],
  [['doctor', '--bogus'], /error: unknown option '--bogus'/],
  [['benchmark'], /error: unknown command 'benchmark'/],
];
for (const [args, message] of usage) {
  test(`bad usage is refused with exit 2: ${args.join(' ')}`, () => {
    const r = run(args);
    assert.is(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
  });
}

// Each is refused before any worker starts; before, some were exit 1, and the last three ran
// (a request number past --requests failed nothing; 23.5 GiB of KV failed in a worker).
const demoUsage: [string[], NodeJS.ProcessEnv, RegExp][] = [
  [['--requests', '0'], {}, /Expected --requests to be an integer from 1 to 100000, got "0"/],
  [['--layers', '1.5'], {}, /Expected --layers to be an integer from 1 to 1024, got "1.5"/],
  [['--layer-ms', '1e9'], {}, /Expected --layer-ms to be an integer from 0 to 1000, got "1e9"/],
  [['--fail-encoder', '3', '--requests', '2'], {}, /Expected --fail-encoder to be an integer from 1 to 2, got "3"/],
  [['--concurrency', '1000'], {}, /the workers would allocate 23\.5 GiB for KV caches and the encoder's pool; keep it at or under 4 GiB/],
  [[], { TE_HANDSHAKE_PORT: '17777' }, /cannot share the fixed handshake port 17777 \(TE_HANDSHAKE_PORT/],
];
for (const [args, env, message] of demoUsage) {
  test(`demo refuses bad usage with exit 2: ${[...Object.entries(env).map(([k, v]) => `${k}=${v}`), ...args].join(' ')}`, () => {
    const r = run(['demo', ...args], env);
    assert.is(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
  });
}

test('a demo worker that fails to start stops the others, and te ends with its error and code', () => {
  const pids = mkdtempSync(join(tmpdir(), 'te-demo-pids-'));
  try {
    const r = run(['demo', '--module-path', failsInOneWorker, '--requests', '1'], { FAIL_DEMO_ROLE: 'decode', FAIL_DEMO_PIDS: pids, NO_COLOR: '1' });
    // Before, the encoder and the prefill kept running and te never ended (killed here at 60 s).
    assert.is(r.status, 1, `status ${r.status}, signal ${r.signal}: ${r.stderr}`);
    assert.match(
      r.stderr,
      /te: the decode worker failed to start: .*failed to create its transport \(create\(\)\): refused in the decode worker \[INTERNAL\]$/m,
    );
    const started = readdirSync(pids);
    assert.equal(started.sort(), ['decode', 'encoder', 'prefill']);
    for (const role of started) {
      const pid = Number(readFileSync(join(pids, role), 'utf8'));
      assert.throws(() => process.kill(pid, 0), /ESRCH/, `the ${role} worker (pid ${pid}) is still running`);
    }
  } finally {
    rmSync(pids, { recursive: true, force: true });
  }
});

test('a command whose work can never finish ends with exit 1 and says so, not exit 0', () => {
  // Loading this plugin module never ends and holds nothing open: the event loop empties with
  // the command pending. Before, te then ended with exit 0 and printed nothing.
  const r = run(['doctor', '--module-path', neverLoads], { NO_COLOR: '1' });
  assert.is(r.status, 1, `status ${r.status}, signal ${r.signal}: ${r.stderr}`);
  assert.match(r.stderr, /te: the command ended before its work did: nothing was left to wait for .*\[INTERNAL\]/);
});

test('bench pd ends with the code of what failed in its prefill process, not a generic one', () => {
  const r = run(['bench', 'pd', '--connector', 'warp-drive', '--rooms', '1', '--tokens', '64'], { NO_COLOR: '1' });
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /te: the prefill process failed to start: Unknown connector "warp-drive".*\[PLUGIN_UNKNOWN\]$/m);
});

test.run();
