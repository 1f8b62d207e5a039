#!/usr/bin/env node
// Benchmarks te transports on loopback beside the baselines measured in the same run:
// iperf3's single TCP stream (before and after te, mean taken) and raw libfabric RMA
// (bench/fabric-rma: two processes, fi_write/fi_read over tcp;ofi_rxm with the same number
// of operations in flight as te has requests in flight). Prints ratios next to the targets.
// Writes are also measured raw with FI_DELIVERY_COMPLETE: a te write completes only once
// applied at the target, and that column compares like with like; the targets use the
// plain (faster) raw figure. They are measured a third time with one more busy thread in the
// raw initiator (as te's JS thread), printed in a second table. Last, the same-host path
// (mooncake-shm) beside memcpy.
//
//   node bench/vs-iperf3.mjs [--plugin mooncake-tcp,mooncake-rdma] [--duration 3] [--rounds 1] [--json out.json] [--strict]
//
// Each case's raw baseline runs immediately before its te runs (raw, raw applied, then every
// plugin), so a ratio compares figures taken seconds apart, not minutes: on a shared host
// the provider's own rate drifts by 2× between minutes. `--rounds N` repeats the whole
// sequence N times; each figure printed is the median over rounds, and each ratio is the
// median of the per-round ratios (te and raw of the same round), with their spread.
//
// Methodology: every te case runs `te bench --loopback --verify` (two processes; every byte
// that landed is checked by sha256 on both sides after the timed run, and a verified pass
// precedes timing); the raw baseline checks every slot by checksum on both sides. Two
// shapes: small batches (1–4 requests per batch, four batches in flight) and PD batches
// (64–128 requests per batch, as a KV transfer of many pages submits them). The exit
// status is non-zero when a case was not verified, and with --strict also when a target
// is missed.
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { QUICK } from './lib/quick.mjs';
import { runRawFabric } from './lib/raw-fabric.mjs';
import { runTeBench } from './lib/te-bench.mjs';
import { freePort, median } from './lib/ranks.mjs';

const { values } = parseArgs({
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp,mooncake-rdma' },
    duration: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '1' },
    json: { type: 'string' },
    strict: { type: 'boolean', default: false },
  },
});
// A smoke run times each case for 0.3 s (iperf3 for its minimum, 1 s): the code paths and
// the verification are the same, the figures not meaningful.
const duration = QUICK ? 0.3 : Number(values.duration);
const iperf3Seconds = QUICK ? 1 : duration;
const plugins = values.plugin.split(',').map((p) => p.trim()).filter(Boolean);
const requestedRounds = Number(values.rounds);
if (!Number.isInteger(requestedRounds) || requestedRounds < 1 || requestedRounds > 20) {
  console.error(`bench/vs-iperf3.mjs: --rounds must be an integer from 1 to 20, got ${values.rounds}`);
  process.exit(2);
}
// A smoke run keeps two rounds at most: enough to run the pairing and the medians.
const rounds = QUICK ? Math.min(requestedRounds, 2) : requestedRounds;

const KiB = 1024;
const MiB = 1024 * KiB;
const SHAPES = [
  { size: 4 * KiB, shape: 'requests', batch: 64, concurrency: 4 },
  { size: 64 * KiB, shape: 'small batches', batch: 4, concurrency: 4 },
  { size: 64 * KiB, shape: 'PD batches', batch: 128, concurrency: 4 },
  { size: 1 * MiB, shape: 'small batches', batch: 1, concurrency: 4 },
  { size: 1 * MiB, shape: 'PD batches', batch: 64, concurrency: 4 },
  { size: 16 * MiB, shape: 'small batches', batch: 1, concurrency: 4 },
];
const ALL = SHAPES.flatMap((s) => ['write', 'read'].map((op) => ({ ...s, op })));
// A smoke run (TE_BENCH_QUICK) keeps one request-rate case and one bandwidth case.
const CASES = QUICK ? ALL.filter((c) => (c.size === 4 * KiB && c.op === 'write') || (c.size === MiB && c.shape === 'small batches' && c.op === 'read')) : ALL;

const sizeName = (n) => (n >= MiB ? `${n / MiB} MiB` : `${n / KiB} KiB`);
const caseName = (c) => `${sizeName(c.size)} ${c.op}, ${c.shape} (${c.batch} × ${c.concurrency})`;

/**
 * The targets this benchmark checks, per plugin: a ratio to the raw libfabric run of the
 * same op, size and operations in flight; a request rate; or reads within 10% of writes.
 */
function targetOf(plugin, c) {
  if (plugin === 'mooncake-tcp') {
    if (c.size === 4 * KiB && c.op === 'write') return { requestsPerSecond: 700_000 };
    if ((c.size === 64 * KiB || c.size === MiB) && c.op === 'write') return { rawRatio: 1.0 };
    if (c.op === 'read' && c.size <= MiB) return { ofWrite: 0.9 };
  }
  if (plugin === 'mooncake-rdma') {
    if (c.size === 4 * KiB) return { requestsPerSecond: 250_000 };
    if (c.size === 64 * KiB || c.size === MiB) return { rawRatio: 0.9 };
  }
  return undefined;
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
    const out = execFileSync('iperf3', ['-c', '127.0.0.1', '-p', String(port), '-t', String(iperf3Seconds), '-P', '1', '-J'], { encoding: 'utf8' });
    return JSON.parse(out).end.sum_received.bits_per_second / 8;
  } finally {
    server.kill();
  }
}

const teBench = (plugin, c) => runTeBench(plugin, c, duration);

const gb = (x) => (x / 1e9).toFixed(2);
function printTable(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => String(row[i] ?? '').length)));
  for (const row of rows) console.log(row.map((cell, i) => String(cell).padEnd(widths[i] ?? 0)).join('  ').trimEnd());
}
const rawKey = (c, applied = false, third = false) => `${c.op}/${c.size}/${c.batch * c.concurrency}${applied ? '/applied' : ''}${third ? '/third-thread' : ''}`;
// te runs a JS thread beside its transport threads (woken for each completion, busy part of
// the time); raw libfabric runs one thread per process. Raw delivery-complete writes are
// measured once more with such a thread added, so a host without a spare core shows what
// one more runnable thread costs the provider itself.
const THIRD_THREAD = '30:90';

/** One figure per field, the median over rounds (verified only when every round was). */
function medianRun(runs) {
  const out = { ...runs[0], rounds: runs.length };
  for (const k of ['bytesPerSecond', 'requestsPerSecond', 'p50Us', 'p99Us']) out[k] = median(runs.map((r) => r[k]));
  out.verified = runs.every((r) => r.verified);
  return out;
}
/** Median and spread of te/raw over rounds, each round's te against that round's raw. */
function pairedRatio(teRuns, rawRuns) {
  const ratios = teRuns.map((r, i) => r.bytesPerSecond / rawRuns[i].bytesPerSecond);
  return { median: median(ratios), min: Math.min(...ratios), max: Math.max(...ratios) };
}
/** "0.45", or "0.45 [0.42–0.48]" (the spread over rounds) when there were several. */
const ratioText = (p) => p.median.toFixed(2) + (rounds > 1 ? ` [${p.min.toFixed(2)}–${p.max.toFixed(2)}]` : '');

const baselineBefore = await iperf3();
const rawRuns = new Map(); // rawKey -> one run per round
const teRuns = new Map(); // plugin/case index -> one run per round
const push = (map, key, run) => (map.get(key) ?? map.set(key, []).get(key)).push(run);
for (let round = 1; round <= rounds; round++) {
  const measured = new Set();
  for (const [i, c] of CASES.entries()) {
    const tag = rounds > 1 ? ` (round ${round} of ${rounds})` : '';
    // Cases that share op, size and operations in flight share their raw runs.
    if (!measured.has(rawKey(c))) {
      measured.add(rawKey(c));
      process.stderr.write(`raw libfabric: ${caseName(c)}${tag} ...\n`);
      push(rawRuns, rawKey(c), runRawFabric({ op: c.op, size: c.size, window: c.batch * c.concurrency, seconds: duration }));
      if (c.op === 'write') {
        push(rawRuns, rawKey(c, true), runRawFabric({ op: c.op, size: c.size, window: c.batch * c.concurrency, seconds: duration, deliveryComplete: true }));
        push(rawRuns, rawKey(c, true, true), runRawFabric({ op: c.op, size: c.size, window: c.batch * c.concurrency, seconds: duration, deliveryComplete: true, thirdThread: THIRD_THREAD }));
      }
    }
    for (const plugin of plugins) {
      process.stderr.write(`${plugin}: ${caseName(c)}${tag} ...\n`);
      push(teRuns, `${plugin}/${i}`, teBench(plugin, c));
    }
  }
}
const raw = new Map([...rawRuns].map(([k, runs]) => [k, medianRun(runs)]));
const results = plugins.flatMap((plugin) => CASES.map((c, i) => ({ plugin, case: c, runs: teRuns.get(`${plugin}/${i}`), r: medianRun(teRuns.get(`${plugin}/${i}`)) })));
// The same-host path (mooncake-shm) beside single-thread memcpy, measured by its own
// benchmark in this run (bench/same-host.mjs: both processes, every case verified).
process.stderr.write('mooncake-shm: same-host writes beside memcpy ...\n');
const sameHost = JSON.parse(execFileSync(process.execPath, [join(dirname(fileURLToPath(import.meta.url)), 'same-host.mjs'), '--no-tcp', '--json', '--seconds', String(duration)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim().split('\n').pop());
const baselineAfter = await iperf3();
const iperf = (baselineBefore + baselineAfter) / 2;

console.log(`\niperf3 single stream, loopback: ${gb(baselineBefore)} GB/s before, ${gb(baselineAfter)} GB/s after (using ${gb(iperf)})`);
console.log(`raw libfabric RMA (tcp;ofi_rxm, two processes, same operations in flight), ${duration} s per case, each run just before te's runs of the same case;`);
if (rounds > 1) console.log(`${rounds} rounds: figures are medians over rounds; "× raw" is the median of each round's te/raw, its spread in brackets`);
console.log('"× raw applied": against raw writes with FI_DELIVERY_COMPLETE (complete once applied at the target, as te\'s writes are)');
console.log(`te: ${plugins.join(', ')}, ${duration} s per case, every case verified by sha256\n`);
const rows = [['plugin', 'case', 'GB/s', 'req/s', 'p50 µs', 'p99 µs', '× iperf3', 'raw GB/s', '× raw', '× raw applied', 'target', 'met']];
const third = [['plugin', 'case', 'GB/s', 'raw applied GB/s', `+ third thread (${THIRD_THREAD} µs)`, '× raw applied + third thread']];
const summary = [];
let missed = 0;
let unverified = 0;
for (const { plugin, case: c, runs, r } of results) {
  const base = raw.get(rawKey(c));
  const paired = pairedRatio(runs, rawRuns.get(rawKey(c)));
  const rawRatio = paired.median;
  const applied = raw.get(rawKey(c, true));
  const appliedRatio = applied ? pairedRatio(runs, rawRuns.get(rawKey(c, true))).median : undefined;
  // Writes also beside raw delivery-complete writes with one more busy thread (second table).
  const appliedThird = raw.get(rawKey(c, true, true));
  const thirdRatio = appliedThird && pairedRatio(runs, rawRuns.get(rawKey(c, true, true)));
  const goal = targetOf(plugin, c);
  let target = '-';
  let met;
  if (goal?.rawRatio) {
    target = `≥ ${goal.rawRatio.toFixed(1)}× raw`;
    met = rawRatio >= goal.rawRatio;
  } else if (goal?.requestsPerSecond) {
    target = `≥ ${goal.requestsPerSecond / 1000}k req/s`;
    met = r.requestsPerSecond >= goal.requestsPerSecond;
  } else if (goal?.ofWrite) {
    const w = results.find((x) => x.plugin === plugin && x.case.op === 'write' && x.case.size === c.size && x.case.shape === c.shape);
    if (w) {
      // Read and write of one shape run one after the other in each round: paired too.
      target = `≥ ${goal.ofWrite}× write`;
      met = median(runs.map((x, i) => x.bytesPerSecond / w.runs[i].bytesPerSecond)) >= goal.ofWrite;
    }
  }
  const verified = r.verified && base.verified && (applied?.verified ?? true) && (appliedThird?.verified ?? true);
  if (!verified) unverified++;
  if (met === false) missed++;
  rows.push([plugin, caseName(c), gb(r.bytesPerSecond), Math.round(r.requestsPerSecond).toLocaleString('en'), r.p50Us.toFixed(0), r.p99Us.toFixed(0), (r.bytesPerSecond / iperf).toFixed(2), gb(base.bytesPerSecond), ratioText(paired), appliedRatio === undefined ? '-' : appliedRatio.toFixed(2), target, met === undefined ? '-' : met ? 'yes' : 'NO', ...(verified ? [] : ['NOT VERIFIED'])]);
  if (appliedThird) third.push([plugin, caseName(c), gb(r.bytesPerSecond), gb(applied.bytesPerSecond), gb(appliedThird.bytesPerSecond), ratioText(thirdRatio)]);
  summary.push({ plugin, case: caseName(c), ...r, ratioToIperf3: r.bytesPerSecond / iperf, raw: base, ratioToRaw: rawRatio, ratioToRawRange: [paired.min, paired.max], rawApplied: applied, ratioToRawApplied: appliedRatio, rawAppliedThirdThread: appliedThird, ratioToRawAppliedThirdThread: thirdRatio?.median, target, met, perRound: runs });
}
printTable(rows);
console.log(`\nwrites beside raw delivery-complete writes with one more busy thread in the raw initiator (fi_rma_bench --third-thread ${THIRD_THREAD}: spins ${THIRD_THREAD.split(':')[0]} µs, sleeps ${THIRD_THREAD.split(':')[1]} µs),`);
console.log(`as te's JS thread runs beside its transport threads; on a host with no spare core this is the like-for-like baseline (${availableParallelism()} cores here):`);
printTable(third);
console.log(`\nsame-host (mooncake-shm, ${sameHost.inflight} batches in flight) beside single-thread memcpy in this run:`);
for (const r of sameHost.rows) {
  const target = r.size === '1 MiB' ? '≥ 0.5× memcpy' : '-';
  const met = r.size === '1 MiB' ? r.shmVsMemcpy >= 0.5 : undefined;
  if (met === false) missed++;
  if (!r.verified) unverified++;
  console.log(`  ${r.size.padEnd(7)} memcpy ${String(r.memcpyGBps).padStart(6)} GB/s  mooncake-shm ${String(r.shmGBps).padStart(6)} GB/s  ${String(r.shmVsMemcpy).padStart(5)}×  ${target}${met === undefined ? '' : met ? '  met' : '  NOT met'}`);
  summary.push({ plugin: 'mooncake-shm', case: `${r.size} write, same host`, bytesPerSecond: r.shmGBps * 1e9, verified: r.verified, ratioToMemcpy: r.shmVsMemcpy, target, met });
}
const withTargets = summary.filter((s) => s.met !== undefined).length;
console.log(`\ntargets met: ${withTargets - missed} of ${withTargets}${QUICK ? ' (smoke run: figures not meaningful)' : ''}; cases verified: ${summary.length - unverified} of ${summary.length}`);
if (values.json) writeFileSync(values.json, JSON.stringify({ iperf3: { before: baselineBefore, after: baselineAfter }, rounds, raw: Object.fromEntries(raw), rawPerRound: Object.fromEntries(rawRuns), sameHost, results: summary }, null, 2));
process.exitCode = unverified > 0 || (values.strict && missed > 0) ? 1 : 0;
