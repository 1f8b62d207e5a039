#!/usr/bin/env node
// Where the time of one small request goes, per layer, on both sides of a real run:
// `te bench --loopback` (4 KiB requests, batches of 64, 4 in flight by default) runs with
// V8's CPU profiler in the initiator, while every thread's CPU time, in both processes, is
// sampled from /proc. Reported per request:
//   - each thread's CPU time (the JS threads, the transport's I/O or progress threads, …),
//     split into user and kernel (system) time;
//   - the initiator's JS thread split by code: the engine (@te/connector), the plugin (its
//     TypeScript and the addon methods it calls, e.g. submit), the bench driver, Node
//     internals, other native code called from JS (completion delivery) and garbage collection.
// Steady state only: each plugin runs twice, for `--duration` seconds and for a third of it,
// and every figure is (long run − short run) ÷ (requests of the long run − of the short one),
// so process start-up, registration and the verification passes cancel out.
//
//   node bench/per-request.mjs [--plugin mooncake-tcp,mooncake-rdma] [--op write|read] [--block-size 4096]
//                              [--batch-size 64] [--concurrency 4] [--duration 3] [--json]
//                              [--vs-raw]  (first the raw libfabric baseline, same shape, same figures)
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { QUICK } from './lib/quick.mjs';
import { buildRawFabric } from './lib/raw-fabric.mjs';
import { measureSteadyState, stalledPairMessages } from './lib/steady-state.mjs';
import { frameName, layerOf } from './lib/js-layers.mjs';

const { values } = parseCli({
  usage: 'node bench/per-request.mjs [options]',
  summary:
    "Where the time of one small request goes: `te bench --loopback` under the V8 CPU profiler, with every thread's CPU time sampled from /proc in both processes; steady state per request.",
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp,mooncake-rdma', help: 'te transports, comma-separated' },
    op: { type: 'string', default: 'write', help: 'write or read' },
    'block-size': { type: 'string', number: { integer: true, min: 1, max: 1073741824 }, default: '4096', help: 'bytes per request' },
    'batch-size': { type: 'string', number: { integer: true, min: 1, max: 1000000 }, default: '64', help: 'requests per batch' },
    concurrency: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '4', help: 'batches in flight' },
    duration: { type: 'string', number: { above: 0, max: 3600 }, default: '3', help: 'seconds of the long run (the short one is a third)' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
    'vs-raw': { type: 'boolean', default: false, help: 'run the raw libfabric baseline first, same shape, same figures' },
  },
});
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const duration = QUICK ? 1 : Number(values.duration);
if (values.op !== 'write' && values.op !== 'read') {
  console.error(`bench/per-request.mjs: --op must be write or read, not ${values.op}`);
  process.exit(2);
}
const TICK_S = 1 / 100; // /proc CPU times are in clock ticks (USER_HZ, 100 on Linux)

/** CPU seconds of every thread of `pid` and its children, by "pid/thread name". */
function threadTimes(pid, out) {
  let tasks;
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return;
  }
  for (const tid of tasks) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      // The JS thread is the one whose id is the process id; V8's helper threads (GC,
      // compilers) carry the same name, "node".
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const name = comm === 'node' ? (tid === String(pid) ? 'node (JS thread)' : 'node (V8 helper threads)') : comm;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const user = Number(fields[11]) * TICK_S;
      const sys = Number(fields[12]) * TICK_S;
      out.set(`${pid}/${tid}`, { pid, name, user, sys });
      for (const child of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) threadTimes(Number(child), out);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
}

/** Self time (seconds) of a V8 CPU profile, grouped by the layer its code belongs to. */
function layersOf(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  const dt = profile.timeDeltas;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]);
    self.set(node, (self.get(node) ?? 0) + (dt[i] ?? 0) / 1e6);
  }
  const layers = {};
  for (const [node, s] of self) {
    const layer = layerOf(node.callFrame);
    layers[layer] = (layers[layer] ?? 0) + s;
  }
  return layers;
}

/** The `n` functions with the most self time (TE_PROFILE_TOP=n), for digging into a layer. */
function printTop(profile, n) {
  const self = new Map();
  const byId = new Map(profile.nodes.map((x) => [x.id, x]));
  profile.samples.forEach((id, i) => {
    const key = frameName(byId.get(id).callFrame);
    self.set(key, (self.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1e3);
  });
  for (const [k, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, n)) console.error(`    ${ms.toFixed(0).padStart(6)} ms  ${k}`);
}

/**
 * Runs `args` under the thread sampler: its last stdout line (JSON) and CPU seconds per
 * thread, keyed "initiator: name" for the spawned process and "target: name" for its
 * children (te bench's target rank, fi_rma_bench's forked target).
 */
async function sampled(file, args, what) {
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (d) => (stdout += d));
  const threads = new Map();
  const sampler = setInterval(() => threadTimes(child.pid, threads), 100);
  const code = await new Promise((resolve) => child.on('exit', resolve));
  clearInterval(sampler);
  if (code !== 0) throw new Error(`${what} exited with ${code}`);
  const result = JSON.parse(stdout.trim().split('\n').pop());
  const side = (pid) => (pid === child.pid ? 'initiator' : 'target');
  const perThread = {};
  for (const t of threads.values()) {
    const key = `${side(t.pid)}: ${t.name}`;
    const acc = (perThread[key] ??= { user: 0, sys: 0 });
    acc.user += t.user;
    acc.sys += t.sys;
  }
  return { result, perThread, side };
}

/** One te run of `seconds`: its result, CPU seconds per thread, and JS self time per layer. */
async function run(plugin, seconds) {
  const dir = mkdtempSync(join(tmpdir(), 'te-per-request-'));
  const args = [
    te,
    'bench',
    '--loopback',
    '--json',
    '--plugin',
    plugin,
    '--op',
    values.op,
    '--block-size',
    values['block-size'],
    '--batch-size',
    values['batch-size'],
    '--concurrency',
    values.concurrency,
    '--duration',
    String(seconds),
  ];
  const { result, perThread, side } = await sampled(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${dir}`, ...args], 'te bench');
  // Profile files are named CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile.
  const profiles = readdirSync(dir).map((f) => ({
    f,
    pid: Number(/^CPU\.\d+\.\d+\.(\d+)\./.exec(f)?.[1]),
    profile: JSON.parse(readFileSync(join(dir, f), 'utf8')),
  }));
  if (process.env.TE_PROFILE_TOP) printTop(profiles[0].profile, Number(process.env.TE_PROFILE_TOP));
  rmSync(dir, { recursive: true, force: true });
  const jsLayers = {};
  for (const p of profiles) for (const [layer, s] of Object.entries(layersOf(p.profile))) jsLayers[`${side(p.pid)}: ${layer}`] = s;
  return { result, perThread, jsLayers };
}

/**
 * One run of the raw libfabric baseline (--vs-raw): the same operation, size and number of
 * operations in flight as te's batches × concurrency, posted one per request.
 */
async function runRaw(seconds) {
  const window = Number(values['batch-size']) * Number(values.concurrency);
  const args = ['--op', values.op, '--size', values['block-size'], '--window', String(window), '--seconds', String(seconds), '--provider', 'tcp;ofi_rxm'];
  // te's completed write is applied at the target: compare with raw writes that promise the same.
  if (values.op === 'write') args.push('--delivery-complete');
  const { result, perThread } = await sampled(buildRawFabric(), args, 'fi_rma_bench');
  if (!result.verified) throw new Error('fi_rma_bench: the destination did not hold what was sent');
  return { result: { requests: result.ops, requestsPerSecond: result.requestsPerSecond, op: result.op, blockSize: result.size }, perThread, jsLayers: {} };
}

const ns = (seconds, requests) => (requests > 0 ? (seconds / requests) * 1e9 : 0);
const cpuOf = (t) => t.user + t.sys;
const total = (m, f) => Object.values(m.perThread).reduce((acc, t) => acc + f(t), 0);
const shape = `${values['block-size']} B ${values.op}s, batches of ${values['batch-size']} × ${values.concurrency} in flight`;

function print(m, caption) {
  console.log(
    `\n${m.plugin}: ${Math.round(m.result.requestsPerSecond).toLocaleString('en')} requests/s in the longer run (${ns(1, m.result.requestsPerSecond).toFixed(0)} ns of wall time per request), ${caption}`,
  );
  console.log('  CPU time per request, steady state, by thread (threads named by Node/libuv/the addon):');
  console.log(`    ${''.padEnd(52)} ${'all'.padStart(7)}    ${'user'.padStart(7)} ${'kernel'.padStart(7)}`);
  for (const [k, t] of Object.entries(m.perThread).sort((x, y) => cpuOf(y[1]) - cpuOf(x[1]))) {
    if (ns(cpuOf(t), m.requests) >= 5)
      console.log(
        `    ${k.padEnd(52)} ${ns(cpuOf(t), m.requests).toFixed(0).padStart(7)} ns ${ns(t.user, m.requests).toFixed(0).padStart(7)} ${ns(t.sys, m.requests).toFixed(0).padStart(7)}`,
      );
  }
  console.log(
    `    ${'both processes, all threads'.padEnd(52)} ${ns(total(m, cpuOf), m.requests).toFixed(0).padStart(7)} ns ${ns(
      total(m, (t) => t.user),
      m.requests,
    )
      .toFixed(0)
      .padStart(7)} ${ns(
      total(m, (t) => t.sys),
      m.requests,
    )
      .toFixed(0)
      .padStart(7)}`,
  );
  if (Object.keys(m.jsLayers).length === 0) return;
  console.log('  JS thread per request, steady state, by code (V8 CPU profile self time; idle left out):');
  for (const [k, s] of Object.entries(m.jsLayers).sort((x, y) => y[1] - x[1]))
    if (!k.endsWith('idle') && ns(s, m.requests) >= 5) console.log(`    ${k.padEnd(52)} ${ns(s, m.requests).toFixed(0).padStart(7)} ns`);
}

const reports = [];
const jobs = values.plugin
  .split(',')
  .map((p) => p.trim())
  .filter(Boolean)
  .map((plugin) => ({ name: plugin, once: (seconds) => run(plugin, seconds), caption: 'verified pass first' }));
if (values['vs-raw']) {
  const window = Number(values['batch-size']) * Number(values.concurrency);
  jobs.unshift({
    name: 'raw libfabric',
    once: runRaw,
    caption: `fi_rma_bench over tcp;ofi_rxm, ${window} operations in flight${values.op === 'write' ? ', delivery-complete' : ''}, every slot checked`,
  });
}
for (const job of jobs) {
  process.stderr.write(`${job.name}: ${shape}, ${duration} s and ${(duration / 3).toFixed(1)} s ...\n`);
  const stalled = stalledPairMessages(job.name, 'requests');
  const m = await measureSteadyState(job.name, job.once, duration, (next) => process.stderr.write(`${stalled.retry(next)}\n`));
  reports.push(m);
  if (m.requests <= 0) {
    // A stalled host gives no figures; the exit status says so to a script.
    console.error(`${stalled.givenUp()}; no steady-state figures`);
    process.exitCode = 1;
    continue;
  }
  if (!values.json) print(m, job.caption);
}
const raw = values['vs-raw'] ? reports[0] : undefined;
if (raw && raw.requests > 0 && !values.json) {
  // Kernel time is the fair measure: the raw baseline's threads poll, so its user time
  // includes spinning while nothing is due, where te's threads sleep.
  console.log(`\nKernel CPU per request, both processes (steady state; raw libfabric polls, so its user time is mostly spinning):`);
  const rawKernel = ns(
    total(raw, (t) => t.sys),
    raw.requests,
  );
  console.log(`  ${'raw libfabric'.padEnd(16)} ${rawKernel.toFixed(0).padStart(8)} ns`);
  for (const m of reports.slice(1)) {
    if (m.requests <= 0) continue;
    const k = ns(
      total(m, (t) => t.sys),
      m.requests,
    );
    console.log(`  ${m.plugin.padEnd(16)} ${k.toFixed(0).padStart(8)} ns  ${(k / rawKernel).toFixed(2)}× raw`);
  }
}
if (values.json) {
  const perRequest = (o, f) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v)]));
  console.log(
    JSON.stringify(
      reports.map((m) => ({
        plugin: m.plugin,
        op: m.result.op,
        blockSize: m.result.blockSize,
        requestsPerSecond: m.result.requestsPerSecond,
        requests: m.requests,
        cpuNsPerRequestByThread: perRequest(m.perThread, (t) => ns(cpuOf(t), m.requests)),
        kernelNsPerRequestByThread: perRequest(m.perThread, (t) => ns(t.sys, m.requests)),
        jsNsPerRequestByLayer: perRequest(m.jsLayers, (s) => ns(s, m.requests)),
      })),
    ),
  );
}
