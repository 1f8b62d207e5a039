#!/usr/bin/env node
// Benchmarks a te transport on loopback against iperf3's single TCP stream measured in the
// same run (before and after te, median taken), and prints the ratios next to the floors.
//
//   node bench/vs-iperf3.mjs [--plugin mooncake-tcp] [--duration 5] [--json out.json]
//
// Methodology: every te case runs `te bench --loopback --verify` (two processes; every byte
// that landed is checked by sha256 on both sides after the timed run, and a verified pass
// precedes timing). iperf3 3.x is single-threaded: one stream is "one core of kernel TCP".
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { QUICK } from './lib/quick.mjs';

const { values } = parseArgs({
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp' },
    duration: { type: 'string', default: '5' },
    json: { type: 'string' },
  },
});
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const duration = QUICK ? 1 : Number(values.duration);

const CASES = [
  { name: '1 MiB write', op: 'write', blockSize: '1MiB', batchSize: 1, concurrency: 4, floor: { ratio: 1.0 } },
  { name: '64 KiB write', op: 'write', blockSize: '64KiB', batchSize: 8, concurrency: 4, floor: { ratio: 0.7 } },
  { name: '4 KiB write', op: 'write', blockSize: '4KiB', batchSize: 64, concurrency: 4, floor: { requestsPerSecond: 150_000 } },
  { name: '1 MiB read', op: 'read', blockSize: '1MiB', batchSize: 1, concurrency: 4, readOf: '1 MiB write' },
  { name: '64 KiB read', op: 'read', blockSize: '64KiB', batchSize: 8, concurrency: 4, readOf: '64 KiB write' },
  { name: '4 KiB read', op: 'read', blockSize: '4KiB', batchSize: 64, concurrency: 4, readOf: '4 KiB write' },
];

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function iperf3() {
  try {
    execFileSync('iperf3', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new Error('iperf3 is not installed: apt-get install -y iperf3');
  }
  const port = await freePort();
  const server = spawn('iperf3', ['-s', '-1', '-B', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  try {
    const out = execFileSync('iperf3', ['-c', '127.0.0.1', '-p', String(port), '-t', String(duration), '-P', '1', '-J'], { encoding: 'utf8' });
    return JSON.parse(out).end.sum_received.bits_per_second / 8;
  } finally {
    server.kill();
  }
}

function teBench(c) {
  const args = [te, 'bench', '--loopback', '--verify', '--json', '--plugin', values.plugin, '--op', c.op, '--block-size', c.blockSize, '--batch-size', String(c.batchSize), '--concurrency', String(c.concurrency), '--duration', String(duration)];
  const out = execFileSync(process.execPath, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  return JSON.parse(out.trim().split('\n').pop());
}

const gb = (x) => (x / 1e9).toFixed(2);
// The floors are mooncake-tcp's targets; other transports are reported without them.
const withFloors = values.plugin === 'mooncake-tcp';
const baselineBefore = await iperf3();
const results = [];
for (const c of CASES) {
  process.stderr.write(`running ${c.name} ...\n`);
  results.push({ case: c, r: teBench(c) });
}
const baselineAfter = await iperf3();
const iperf = (baselineBefore + baselineAfter) / 2;

console.log(`\niperf3 single stream, loopback: ${gb(baselineBefore)} GB/s before, ${gb(baselineAfter)} GB/s after (using ${gb(iperf)})`);
console.log(`te ${values.plugin}, ${duration} s per case, every case verified by sha256\n`);
const rows = [['case', 'GB/s', 'req/s', 'p50 µs', 'p99 µs', '× iperf3', 'floor', 'ok']];
const summary = [];
for (const { case: c, r } of results) {
  const ratio = r.bytesPerSecond / iperf;
  let floor = '';
  let ok = r.verified;
  if (!withFloors) {
    floor = '-';
  } else if (c.floor?.ratio) {
    floor = `≥ ${c.floor.ratio}× iperf3`;
    ok &&= ratio >= c.floor.ratio;
  } else if (c.floor?.requestsPerSecond) {
    floor = `≥ ${c.floor.requestsPerSecond / 1000}k req/s`;
    ok &&= r.requestsPerSecond >= c.floor.requestsPerSecond;
  } else if (c.readOf) {
    const w = results.find((x) => x.case.name === c.readOf).r;
    floor = `within 20% of write`;
    ok &&= r.bytesPerSecond >= 0.8 * w.bytesPerSecond;
  }
  rows.push([c.name, gb(r.bytesPerSecond), Math.round(r.requestsPerSecond).toLocaleString('en'), r.p50Us.toFixed(0), r.p99Us.toFixed(0), ratio.toFixed(2), floor, ok ? 'yes' : 'NO']);
  summary.push({ case: c.name, ...r, ratioToIperf3: ratio, floor, ok });
}
const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => String(row[i]).length)));
for (const row of rows) console.log(row.map((cell, i) => String(cell).padEnd(widths[i])).join('  '));
if (values.json) writeFileSync(values.json, JSON.stringify({ iperf3: { before: baselineBefore, after: baselineAfter }, results: summary }, null, 2));
process.exitCode = summary.every((s) => s.ok) ? 0 : 1;
