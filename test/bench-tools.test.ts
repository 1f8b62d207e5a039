// The benchmark tools refuse bad arguments before measuring anything, npm run bench matches
// its baselines to te and closes with its two judged lines, and the MSG_ZEROCOPY
// comparison (bench/tcp-zerocopy) moves bytes in both of its modes.
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
// @ts-expect-error plain ES module without types (the benchmarks' own helper)
import { buildCBench } from '../bench/lib/c-bench.mjs';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest("the benchmark tools' own checks");

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

test('bench/vs-iperf3.mjs: --rounds outside 1..20 or not an integer, or a duration that is not positive, exits 2 with a message', () => {
  for (const rounds of ['0', '21', '2.5', 'many']) {
    const r = spawnSync(process.execPath, [join(root, 'bench', 'vs-iperf3.mjs'), '--rounds', rounds], { encoding: 'utf8', timeout: 30_000 });
    assert.is(r.status, 2, `--rounds ${rounds}: ${r.stderr}`);
    assert.match(r.stderr, /^Expected --rounds to be an integer from 1 to 20, got /);
  }
  for (const [flag, value] of [
    ['--duration', '0'],
    ['--sweep-seconds', 'soon'],
    ['--duration', '-1'],
  ]) {
    const r = spawnSync(process.execPath, [join(root, 'bench', 'vs-iperf3.mjs'), `${flag}=${value}`], { encoding: 'utf8', timeout: 30_000 });
    assert.is(r.status, 2, `${flag} ${value}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`^Expected ${flag} to be a number above 0 and at most 3600, got `));
  }
});

test("bench/vs-iperf3.mjs: raw libfabric gets te's threads and grouping, and the report closes with targets met and cases verified", () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-vs-'));
  try {
    const json = join(dir, 'out.json');
    const r = spawnSync(process.execPath, [join(root, 'bench', 'vs-iperf3.mjs'), '--plugin', 'mooncake-tcp', '--json', json], {
      encoding: 'utf8',
      timeout: 600_000,
      env: { ...process.env, TE_BENCH_QUICK: '1' },
    });
    assert.is(r.status, 0, r.stderr);
    assert.match(r.stdout, /\ntargets met: \d+ of \d+/);
    assert.match(r.stdout, /\ncases verified: (\d+) of \1\n/);
    const out = JSON.parse(readFileSync(json, 'utf8'));
    assert.ok(out.threads['mooncake-tcp'] >= 1 && out.threads['mooncake-shm'] >= 1, JSON.stringify(out.threads));
    for (const c of out.results.filter((x: { plugin: string }) => x.plugin === 'mooncake-tcp')) {
      // The baseline ran with te's endpoints (or one, where one did better), grouped as te or by one, verified.
      assert.is(c.threads, out.threads['mooncake-tcp']);
      assert.ok([1, c.threads].includes(c.raw.endpoints), JSON.stringify(c.raw));
      assert.ok(c.raw.iov === 1 || c.raw.iov === Math.min(4, Math.floor(1048576 / c.blockSize)), JSON.stringify(c.raw));
      assert.ok(c.raw.swept >= 1 && c.raw.verified === true && c.verified === true);
      // Raw walked te's working set (every request in flight its own block), and its figure is a run of its own after the sweep.
      assert.is(c.raw.span, c.blockSize * c.batchSize * c.concurrency, JSON.stringify(c.raw));
      assert.ok(c.raw.sweepBestBytesPerSecond > 0, JSON.stringify(c.raw));
      assert.is(c.rawSingleThread.endpoints, 1);
      // Raw writes complete on te's promise: a fence per te batch's worth of operations per
      // endpoint; the same point completing once sent is measured beside it for reference.
      if (c.op === 'write') {
        assert.is(c.raw.fenceEvery, Math.max(1, Math.ceil(c.batchSize / (c.raw.iov * c.raw.endpoints))), JSON.stringify(c.raw));
        assert.ok(c.raw.sentBytesPerSecond > 0 && c.ratioToRawSent > 0, JSON.stringify(c.raw));
      } else {
        assert.is(c.raw.fenceEvery, 0, JSON.stringify(c.raw));
        assert.is(c.raw.sentBytesPerSecond, undefined);
      }
    }
    for (const row of out.sameHost.rows) assert.is(row.copyThreads, out.threads['mooncake-shm']);
    // What the host charged for a system call and a wake-up, before and after the cases.
    assert.match(
      r.stdout,
      /\nhost costs: a system call \(getppid\) \d+ ns before, \d+ after; a wake-up round trip between two threads \(eventfd\) [\d.]+ µs before, [\d.]+ after\n/,
    );
    for (const when of ['before', 'after']) {
      const h = out.hostCosts[when];
      assert.ok(h.syscallNs > 0 && h.syscalls > 0 && h.wakeRoundTripUs > 0 && h.roundTrips > 0, JSON.stringify(h));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bench/variants.mjs: a malformed case, variant, round count or duration exits 2 with a message, before any run', () => {
  const bad: [string[], RegExp][] = [
    [['--case', '64k:sideways:4x4'], /bad case '64k:sideways:4x4'/],
    [['--case', '12q:write:4x4'], /bad size '12q'/],
    [['--variant', 'noequals'], /bad variant 'noequals'/],
    [['--variant', 'x=lower=1'], /bad setting 'lower=1'/],
    [['--rounds', '0'], /Expected --rounds to be an integer from 1 to 50, got "0"/],
    [['--duration', '0'], /Expected --duration to be a number above 0/],
    [['--duration=-1'], /Expected --duration to be a number above 0/],
    [['--nope'], /Unknown option '--nope'/],
  ];
  for (const [args, message] of bad) {
    // Also in a smoke run, which replaces the round count and duration after the check.
    for (const quick of ['', '1']) {
      const r = spawnSync(process.execPath, [join(root, 'bench', 'variants.mjs'), ...args], {
        encoding: 'utf8',
        timeout: 30_000,
        env: { ...process.env, TE_BENCH_QUICK: quick },
      });
      assert.is(r.status, 2, `${args.join(' ')} (TE_BENCH_QUICK=${quick}): ${r.stderr}`);
      assert.match(r.stderr, message);
      assert.not.match(r.stderr, /round 1:/, 'nothing was measured');
    }
  }
});

test("bench/variants.mjs: every variant's settings reach the transport (a refused setting fails the comparison)", () => {
  const r = spawnSync(
    process.execPath,
    [
      join(root, 'bench', 'variants.mjs'),
      '--plugin',
      'mooncake-tcp',
      '--case',
      '4k:write:4x1',
      '--variant',
      'ok=',
      '--variant',
      'broken=TE_TCP_IO_THREADS=0',
      '--json',
      '/dev/null',
    ],
    {
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, TE_BENCH_QUICK: '1' },
    },
  );
  assert.is(r.status, 2, 'a variant the plugin refuses must fail the comparison');
  assert.match(r.stderr, /4k:write:4x1 under broken \(\{"TE_TCP_IO_THREADS":"0"\}\): te bench exited with 1/);
  assert.match(r.stderr, /round 1: 4k:write:4x1 ok:/, 'the first variant ran');
  assert.match(r.stderr, /TE_TCP_IO_THREADS/, 'the refusal names the setting');
});

test('bench/per-request.mjs: --op other than write or read exits 2 with a message, before any run', () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'per-request.mjs'), '--op', 'sideways'], { encoding: 'utf8', timeout: 30_000 });
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, /--op must be write or read, not sideways/);
  assert.not.match(r.stderr, /^\s+at /m);
});

test('bench/per-request.mjs --op read --vs-raw: reads are measured, raw libfabric first, both with steady-state CPU per request', () => {
  const r = spawnSync(
    process.execPath,
    [join(root, 'bench', 'per-request.mjs'), '--plugin', 'mooncake-tcp', '--op', 'read', '--block-size', '65536', '--batch-size', '4', '--vs-raw', '--json'],
    {
      encoding: 'utf8',
      timeout: 180_000,
      env: { ...process.env, TE_BENCH_QUICK: '1' },
    },
  );
  assert.is(r.status, 0, r.stderr);
  const reports = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    plugin: string;
    op: string;
    blockSize: number;
    requests: number;
    cpuNsPerRequestByThread: Record<string, number>;
  }[];
  assert.equal(
    reports.map((x) => x.plugin),
    ['raw libfabric', 'mooncake-tcp'],
  );
  for (const x of reports) {
    assert.is(x.op, 'read');
    assert.is(x.blockSize, 65536);
    assert.ok(x.requests > 0, `${x.plugin}: no steady-state requests`);
    // Both processes are sampled: the target's threads appear beside the initiator's.
    const sides = new Set(Object.keys(x.cpuNsPerRequestByThread).map((k) => k.split(':')[0]));
    assert.ok(sides.has('initiator') && sides.has('target'), `${x.plugin}: ${Object.keys(x.cpuNsPerRequestByThread).join(', ')}`);
  }
});

test('bench/allocations.mjs: bad arguments exit 2 with a message, before any run', () => {
  for (const [args, message] of [
    [['--op', 'sideways'], /--op must be write or read, not sideways/],
    [['--duration', '0'], /Expected --duration to be a number above 0/],
    [['--top', 'all'], /Expected --top to be an integer from 0 to 1000, got "all"/],
  ] as const) {
    const r = spawnSync(process.execPath, [join(root, 'bench', 'allocations.mjs'), ...args], { encoding: 'utf8', timeout: 30_000 });
    assert.is(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.not.match(r.stderr, /^\s+at /m);
  }
});

test("bench/allocations.mjs: a real run's steady-state heap bytes per batch, most of them the engine's", () => {
  const r = spawnSync(process.execPath, [join(root, 'bench', 'allocations.mjs'), '--plugin', 'mooncake-tcp', '--json'], {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, TE_BENCH_QUICK: '1' },
  });
  assert.is(r.status, 0, r.stderr);
  const report = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    batches: number;
    bytesPerBatch: number;
    bytesPerBatchByLayer: Record<string, number>;
    topFunctions: { name: string; bytesPerBatch: number }[];
  };
  assert.ok(report.batches > 0, 'batches of difference between the two runs');
  // A batch allocates its promise, its routed call and its deadline timer at least: well over
  // 100 bytes, and (start-up cancelled out) far less than the megabytes a module load takes.
  assert.ok(report.bytesPerBatch > 100 && report.bytesPerBatch < 100_000, `bytes per batch: ${report.bytesPerBatch}`);
  assert.ok((report.bytesPerBatchByLayer['engine (@te/connector)'] ?? 0) > 0, JSON.stringify(report.bytesPerBatchByLayer));
  assert.ok(report.topFunctions.length > 0 && report.topFunctions.some((f) => f.name.includes('packages/connector/')), JSON.stringify(report.topFunctions));
});

const straceWorks = spawnSync('strace', ['-f', '-c', '-o', '/dev/null', 'true'], { stdio: 'ignore' }).status === 0;
const syscallsCase = straceWorks ? test : test.skip;
syscallsCase(
  `bench/syscalls.mjs: an unknown plugin exits 1 with te's typed refusal and the script's own line, no stack trace${straceWorks ? '' : ' — skipped: strace cannot trace on this machine (apt-get install -y strace)'}`,
  () => {
    const r = spawnSync(process.execPath, [join(root, 'bench', 'syscalls.mjs'), '--plugin', 'no-such-plugin'], { encoding: 'utf8', timeout: 120_000 });
    assert.is(r.status, 1, r.stderr);
    assert.match(r.stderr, /PLUGIN_UNKNOWN/);
    assert.match(r.stderr, /^bench\/syscalls\.mjs: te bench under strace exited with 1$/m);
    assert.not.match(r.stderr, /^\s+at /m);
  },
);

const zc = (args: string[]) => spawnSync(buildCBench('tcp-zerocopy', 'zc_bench') as string, args, { encoding: 'utf8', timeout: 60_000 });

test('zc_bench: bad arguments exit 2 with a message', () => {
  for (const args of [['--size', '0'], ['--window', '0'], ['--seconds', '0'], ['--host', 'not-an-address'], ['--bogus']]) {
    const r = zc(args);
    assert.is(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /zc_bench|usage/);
  }
});

test('zc_bench: plain and MSG_ZEROCOPY sends both move bytes; every zerocopy send is released', () => {
  const copy = zc(['--size', '65536', '--window', '4', '--seconds', '0.2']);
  assert.is(copy.status, 0, copy.stderr);
  const c = JSON.parse(copy.stdout.trim());
  assert.is(c.mode, 'copy');
  assert.ok(c.bytesPerSecond > 0);
  const zero = zc(['--size', '65536', '--window', '4', '--seconds', '0.2', '--zerocopy']);
  assert.is(zero.status, 0, zero.stderr);
  const z = JSON.parse(zero.stdout.trim());
  assert.is(z.mode, 'zerocopy');
  assert.ok(z.bytesPerSecond > 0 && z.sends > 0, zero.stdout);
  // Releases come as ranges, so there are at most as many reports as sends, and at least one.
  assert.ok(z.notifications >= 1 && z.notifications <= z.sends, zero.stdout);
});

const hostCosts = (args: string[]) => spawnSync(buildCBench('host-costs', 'host_costs') as string, args, { encoding: 'utf8', timeout: 60_000 });

test('host_costs: bad arguments exit 2 with a message', () => {
  for (const args of [['--seconds', '0'], ['--seconds', '61'], ['--seconds', 'soon'], ['--seconds', '1x'], ['extra'], ['--bogus']]) {
    const r = hostCosts(args);
    assert.is(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /host_costs: --seconds must be|usage: host_costs/);
  }
});

test('host_costs: a system call and a wake-up round trip are timed over the whole window', () => {
  const r = hostCosts(['--seconds', '0.2']);
  assert.is(r.status, 0, r.stderr);
  const h = JSON.parse(r.stdout.trim());
  assert.is(h.seconds, 0.2);
  // Each figure is the window over the count: at least the window was spent, however fast the host.
  assert.ok(h.syscalls > 0 && h.roundTrips > 0, r.stdout);
  assert.ok((h.syscallNs * h.syscalls) / 1e9 >= 0.2 * 0.99, r.stdout);
  assert.ok((h.wakeRoundTripUs * h.roundTrips) / 1e6 >= 0.2 * 0.99, r.stdout);
});

test.run();
