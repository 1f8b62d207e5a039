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
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { QUICK } from './lib/quick.mjs';

const { values } = parseArgs({
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp,mooncake-rdma' },
    op: { type: 'string', default: 'write' },
    'block-size': { type: 'string', default: '4096' },
    'batch-size': { type: 'string', default: '64' },
    concurrency: { type: 'string', default: '4' },
    duration: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
  },
});
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const duration = QUICK ? 1 : Number(values.duration);
if (values.op !== 'write' && values.op !== 'read') throw new Error(`--op must be write or read, not ${values.op}`);
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
    const { url, functionName } = node.callFrame;
    let layer;
    if (functionName === '(idle)') layer = 'idle';
    else if (functionName === '(garbage collector)') layer = 'garbage collection';
    else if (functionName === '(program)' || (!url && functionName !== '(root)')) layer = 'native (called from JS)';
    else if (url.includes('/packages/connector/')) layer = 'engine (@te/connector)';
    // V8 counts the time of an addon method in the JS function that called it.
    else if (url.includes('/plugins/') || url.includes('/packages/fabric/') || url.includes('/packages/cuda/')) layer = 'plugin (TypeScript + the addon calls it makes)';
    else if (url.startsWith('node:')) layer = 'Node internals';
    else if (url.includes('/node_modules/')) layer = 'dependencies';
    else layer = 'bench driver (@te/cli)';
    layers[layer] = (layers[layer] ?? 0) + s;
  }
  return layers;
}

/** The `n` functions with the most self time (TE_PROFILE_TOP=n), for digging into a layer. */
function printTop(profile, n) {
  const self = new Map();
  const byId = new Map(profile.nodes.map((x) => [x.id, x]));
  profile.samples.forEach((id, i) => {
    const { functionName, url, lineNumber } = byId.get(id).callFrame;
    const key = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(packages|plugins)\//, '$1/')}:${lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1e3);
  });
  for (const [k, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, n)) console.error(`    ${ms.toFixed(0).padStart(6)} ms  ${k}`);
}

/** One run of `seconds`: its result, CPU seconds per thread, and JS self time per layer. */
async function run(plugin, seconds) {
  const dir = mkdtempSync(join(tmpdir(), 'te-per-request-'));
  const args = [te, 'bench', '--loopback', '--json', '--plugin', plugin, '--op', values.op, '--block-size', values['block-size'], '--batch-size', values['batch-size'], '--concurrency', values.concurrency, '--duration', String(seconds)];
  const child = spawn(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${dir}`, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (d) => (stdout += d));
  const threads = new Map();
  const sampler = setInterval(() => threadTimes(child.pid, threads), 100);
  const code = await new Promise((resolve) => child.on('exit', resolve));
  clearInterval(sampler);
  if (code !== 0) throw new Error(`te bench exited with ${code}`);
  const result = JSON.parse(stdout.trim().split('\n').pop());
  // Profile files are named CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile.
  const profiles = readdirSync(dir).map((f) => ({ f, pid: Number(/^CPU\.\d+\.\d+\.(\d+)\./.exec(f)?.[1]), profile: JSON.parse(readFileSync(join(dir, f), 'utf8')) }));
  if (process.env.TE_PROFILE_TOP) printTop(profiles[0].profile, Number(process.env.TE_PROFILE_TOP));
  rmSync(dir, { recursive: true, force: true });
  const side = (pid) => (pid === child.pid ? 'initiator' : 'target');
  const perThread = {};
  for (const t of threads.values()) {
    const key = `${side(t.pid)}: ${t.name}`;
    const acc = (perThread[key] ??= { user: 0, sys: 0 });
    acc.user += t.user;
    acc.sys += t.sys;
  }
  const jsLayers = {};
  for (const p of profiles) for (const [layer, s] of Object.entries(layersOf(p.profile))) jsLayers[`${side(p.pid)}: ${layer}`] = s;
  return { result, perThread, jsLayers };
}

/** Steady-state cost: the long run less the short one, per request of the difference. */
async function measure(plugin) {
  const long = await run(plugin, duration);
  const short = await run(plugin, duration / 3);
  const requests = long.result.requests - short.result.requests;
  const perThread = {};
  for (const [k, t] of Object.entries(long.perThread)) {
    const s = short.perThread[k] ?? { user: 0, sys: 0 };
    perThread[k] = { user: Math.max(0, t.user - s.user), sys: Math.max(0, t.sys - s.sys) };
  }
  const jsLayers = {};
  for (const [k, t] of Object.entries(long.jsLayers)) jsLayers[k] = Math.max(0, t - (short.jsLayers[k] ?? 0));
  return { plugin, result: long.result, requests, perThread, jsLayers };
}

const ns = (seconds, requests) => (requests > 0 ? (seconds / requests) * 1e9 : 0);
const cpuOf = (t) => t.user + t.sys;
const reports = [];
for (const plugin of values.plugin.split(',').map((p) => p.trim()).filter(Boolean)) {
  process.stderr.write(`${plugin}: ${values['block-size']} B ${values.op}s, batches of ${values['batch-size']} × ${values.concurrency} in flight, ${duration} s and ${(duration / 3).toFixed(1)} s ...\n`);
  const m = await measure(plugin);
  reports.push(m);
  if (m.requests <= 0) {
    // A stalled host gives no figures; the exit status says so to a script.
    console.error(`${plugin}: the longer run moved no more requests than the shorter one (a stalled host?); no steady-state figures`);
    process.exitCode = 1;
    continue;
  }
  if (values.json) continue;
  console.log(`\n${plugin}: ${Math.round(m.result.requestsPerSecond).toLocaleString('en')} requests/s in the longer run (${ns(1, m.result.requestsPerSecond).toFixed(0)} ns of wall time per request), verified pass first`);
  console.log('  CPU time per request, steady state, by thread (threads named by Node/libuv/the addon):');
  console.log(`    ${''.padEnd(52)} ${'all'.padStart(7)}    ${'user'.padStart(7)} ${'kernel'.padStart(7)}`);
  for (const [k, t] of Object.entries(m.perThread).sort((a, b) => cpuOf(b[1]) - cpuOf(a[1]))) {
    if (ns(cpuOf(t), m.requests) >= 5) console.log(`    ${k.padEnd(52)} ${ns(cpuOf(t), m.requests).toFixed(0).padStart(7)} ns ${ns(t.user, m.requests).toFixed(0).padStart(7)} ${ns(t.sys, m.requests).toFixed(0).padStart(7)}`);
  }
  console.log('  JS thread per request, steady state, by code (V8 CPU profile self time; idle left out):');
  for (const [k, s] of Object.entries(m.jsLayers).sort((a, b) => b[1] - a[1])) if (!k.endsWith('idle') && ns(s, m.requests) >= 5) console.log(`    ${k.padEnd(52)} ${ns(s, m.requests).toFixed(0).padStart(7)} ns`);
}
if (values.json) {
  const perRequest = (o, f) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v)]));
  console.log(JSON.stringify(reports.map((m) => ({ plugin: m.plugin, requestsPerSecond: m.result.requestsPerSecond, requests: m.requests, cpuNsPerRequestByThread: perRequest(m.perThread, (t) => ns(cpuOf(t), m.requests)), kernelNsPerRequestByThread: perRequest(m.perThread, (t) => ns(t.sys, m.requests)), jsNsPerRequestByLayer: perRequest(m.jsLayers, (s) => ns(s, m.requests)) }))));
}
