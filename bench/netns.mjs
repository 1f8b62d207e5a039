#!/usr/bin/env node
// mooncake-tcp between two hosts, beside iperf3 over the same link in the same run. The
// hosts are Linux network namespaces (test/netns/harness) joined by veths through a bridge,
// each with its own address: te's initiator and target, and iperf3's client and server,
// run one in each, so both cross the same virtual link rather than loopback. Needs root.
//
//   node bench/netns.mjs [--duration 3] [--mtu 1500] [--json out.json]
//
// Methodology: every te case runs `te bench --target <host:port> --verify` in the initiator
// host against `te bench --mode target` in the other (sha256 of every byte on both sides
// after the timed run, and a verified pass before it); iperf3 runs one TCP stream before
// and after the te cases, and the mean is the baseline. A veth moves packets by a memcpy in
// the kernel: the figures measure the software path with the network stack in it, not a
// NIC. The exit status is non-zero when a case was not verified.
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { register } from 'tsx/esm/api';
import { QUICK } from './lib/quick.mjs';

const { values } = parseCli({
  usage: 'node bench/netns.mjs [options]',
  summary: 'mooncake-tcp between two network namespaces joined by veths through a bridge, beside iperf3 over the same link in the same run. Needs root.',
  options: {
    duration: { type: 'string', number: { above: 0, max: 3600 }, default: '3', help: 'seconds per timed case' },
    mtu: { type: 'string', number: { integer: true, min: 68, max: 65535 }, default: '1500', help: 'MTU of the veth link' },
    json: { type: 'string', help: 'write the results as JSON to this file' },
  },
});
const duration = QUICK ? 1 : Number(values.duration);
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const KiB = 1024;
const MiB = 1024 * KiB;
const CASES = [
  { size: MiB, batch: 1, concurrency: 4 },
  { size: 64 * KiB, batch: 16, concurrency: 4 },
];

// One harness for the tests and this benchmark: loaded through tsx.
register();
const { Cluster, netnsSupport } = await import('../test/netns/harness/index.ts');
const support = netnsSupport();
if (!support.ok) {
  console.error(`bench/netns.mjs cannot run here: ${support.reason}`);
  process.exit(1);
}
try {
  execFileSync('iperf3', ['--version'], { stdio: 'ignore' });
} catch {
  console.error('iperf3 is not installed: apt-get install -y iperf3');
  process.exit(1);
}

const inNs = (ns, cmd, args, timeoutMs) =>
  execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], { encoding: 'utf8', timeout: timeoutMs, stdio: ['ignore', 'pipe', 'inherit'] });

/** Resolves with the first stdout line of a process matching `test`, or rejects at the deadline. */
function waitLine(child, test, what, timeoutMs = 20_000) {
  return new Promise((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error(`${what}: not ready within ${timeoutMs} ms`)), timeoutMs);
    child.stdout.on('data', (d) => {
      buf += d;
      for (const line of buf.split('\n')) {
        const got = test(line);
        if (got) return (clearTimeout(t), resolve(got));
      }
    });
    child.once('exit', (code) => (clearTimeout(t), reject(new Error(`${what} exited (${code})`))));
  });
}

async function iperf3(c) {
  const server = spawn('ip', ['netns', 'exec', c.host('target').ns, 'iperf3', '-s', '-1', '--forceflush', '-B', c.host('target').address, '-p', '5201'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    await waitLine(server, (l) => /listening/i.test(l), 'iperf3 server');
    const out = inNs(
      c.host('initiator').ns,
      'iperf3',
      ['-c', c.host('target').address, '-p', '5201', '-t', String(duration), '-P', '1', '-J'],
      (duration + 20) * 1000,
    );
    return JSON.parse(out).end.sum_received.bits_per_second / 8;
  } finally {
    server.kill('SIGKILL');
  }
}

async function teCase(c, k) {
  const bytes = k.size * k.batch * k.concurrency;
  const target = spawn(
    'ip',
    [
      'netns',
      'exec',
      c.host('target').ns,
      process.execPath,
      te,
      'bench',
      '--mode',
      'target',
      '--plugin',
      'mooncake-tcp',
      '--bind',
      c.host('target').address,
      '--bytes',
      String(bytes),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    const segment = await waitLine(target, (l) => (l.startsWith('{') ? JSON.parse(l).ready : undefined), 'te bench target');
    const args = [
      te,
      'bench',
      '--target',
      segment,
      '--bind',
      c.host('initiator').address,
      '--plugin',
      'mooncake-tcp',
      '--op',
      'write',
      '--block-size',
      String(k.size),
      '--batch-size',
      String(k.batch),
      '--concurrency',
      String(k.concurrency),
      '--duration',
      String(duration),
      '--verify',
      '--json',
    ];
    const out = inNs(c.host('initiator').ns, process.execPath, args, (duration + 60) * 1000);
    return JSON.parse(out.trim().split('\n').pop());
  } finally {
    target.kill('SIGTERM');
    await new Promise((r) => (target.exitCode !== null ? r() : (target.once('exit', r), setTimeout(() => (target.kill('SIGKILL'), r()), 5_000))));
  }
}

const gb = (x) => (x / 1e9).toFixed(2);
const cluster = Cluster.create(['initiator', 'target'], { mtu: Number(values.mtu) });
try {
  const rxBefore = cluster.counters('target').rx;
  const before = await iperf3(cluster);
  const results = [];
  for (const k of CASES) {
    process.stderr.write(`mooncake-tcp write ${k.size / KiB} KiB (${k.batch} × ${k.concurrency}) ...\n`);
    results.push({ case: k, r: await teCase(cluster, k) });
  }
  const after = await iperf3(cluster);
  const iperf = (before + after) / 2;
  const crossed = cluster.counters('target').rx - rxBefore;
  console.log(`\nhosts: network namespaces ${cluster.host('initiator').address} → ${cluster.host('target').address}, veth + bridge, MTU ${values.mtu}`);
  console.log(`iperf3 single stream across the link: ${gb(before)} GB/s before, ${gb(after)} GB/s after (using ${gb(iperf)})`);
  console.log(
    `te: mooncake-tcp, ${duration} s per case, every case verified by sha256; the target host's link received ${(crossed / 1e9).toFixed(2)} GB in all\n`,
  );
  const rows = [['case', 'batch × conc', 'GB/s', 'req/s', 'p50 µs', 'p99 µs', '× iperf3', 'verified']];
  for (const { case: k, r } of results)
    rows.push([
      `${k.size >= MiB ? `${k.size / MiB} MiB` : `${k.size / KiB} KiB`} write`,
      `${k.batch} × ${k.concurrency}`,
      gb(r.bytesPerSecond),
      Math.round(r.requestsPerSecond).toLocaleString('en'),
      r.p50Us.toFixed(0),
      r.p99Us.toFixed(0),
      (r.bytesPerSecond / iperf).toFixed(2),
      r.verified ? 'yes' : 'NO',
    ]);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => String(row[i]).length)));
  for (const row of rows)
    console.log(
      row
        .map((cell, i) => String(cell).padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    );
  if (QUICK) console.log('\n(smoke run: figures not meaningful)');
  if (values.json)
    writeFileSync(
      values.json,
      JSON.stringify(
        {
          mtu: Number(values.mtu),
          iperf3: { before, after },
          results: results.map(({ case: k, r }) => ({ ...k, ...r, ratioToIperf3: r.bytesPerSecond / iperf })),
        },
        null,
        2,
      ),
    );
  process.exitCode = results.every(({ r }) => r.verified) ? 0 : 1;
} finally {
  await cluster.close();
}
