#!/usr/bin/env node
// JavaScript heap bytes a batch allocates in the initiator of a real `te bench --loopback`
// run, per layer (engine, plugin, bench driver, Node) and per function. Garbage is work the
// JS thread and V8's helper threads pay for on every batch; like system calls per request
// (bench/syscalls.mjs), bytes per batch do not move with the load of the host, unlike GB/s.
//
// V8's sampling heap profiler runs in the initiator for the whole run, objects already
// freed included (bench/lib/heap-sampler.cjs). Steady state only: each case runs for
// `--duration` seconds and for a third of it, and every figure is (long run − short run) ÷
// (batches of the long run − of the short one), so start-up, module loading, registration
// and the verification passes cancel out (a pair whose long run completed no more batches, on
// a stalled host, is run again, up to 3 pairs). Sampling is statistical (one sample per KiB on
// average): figures move by a few percent between runs.
//
//   node bench/allocations.mjs [--plugin mooncake-tcp] [--op write] [--block-size 1048576]
//                              [--batch-size 1] [--concurrency 16] [--duration 3] [--top 12] [--json]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { frameName, layerOf } from './lib/js-layers.mjs';
import { QUICK } from './lib/quick.mjs';
import { runSteadyPair, stalledPairMessages } from './lib/steady-state.mjs';

const { values } = parseCli({
  usage: 'node bench/allocations.mjs [options]',
  summary:
    'JavaScript heap bytes allocated per batch in the initiator of `te bench --loopback`, by layer and by function, steady state (a long run less a short one).',
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp', help: 'te transport' },
    op: { type: 'string', default: 'write', help: 'write or read' },
    'block-size': { type: 'string', number: { integer: true, min: 1, max: 1073741824 }, default: '1048576', help: 'bytes per request' },
    'batch-size': { type: 'string', number: { integer: true, min: 1, max: 1000000 }, default: '1', help: 'requests per batch' },
    concurrency: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '16', help: 'batches in flight' },
    duration: { type: 'string', number: { above: 0, max: 3600 }, default: '3', help: 'seconds of the long run (the short one is a third)' },
    top: { type: 'string', number: { integer: true, min: 0, max: 1000 }, default: '12', help: 'functions listed, most bytes first' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
  },
});
const here = dirname(fileURLToPath(import.meta.url));
const te = join(here, '..', 'packages', 'cli', 'dist', 'te.js');
const sampler = join(here, 'lib', 'heap-sampler.cjs');
const duration = QUICK ? 1 : Number(values.duration);
const top = Number(values.top);
if (values.op !== 'write' && values.op !== 'read') {
  console.error(`bench/allocations.mjs: --op must be write or read, not ${values.op}`);
  process.exit(2);
}

/** One run of `seconds`: te bench's result and the bytes the initiator allocated, by function. */
function run(seconds) {
  const dir = mkdtempSync(join(tmpdir(), 'te-allocations-'));
  const profile = join(dir, 'heap.json');
  try {
    const args = ['--require', sampler, te, 'bench', '--loopback', '--json', '--plugin', values.plugin, '--op', values.op];
    args.push('--block-size', values['block-size'], '--batch-size', values['batch-size'], '--concurrency', values.concurrency, '--duration', String(seconds));
    const r = spawnSync(process.execPath, args, { encoding: 'utf8', env: { ...process.env, TE_HEAP_PROFILE: profile }, stdio: ['ignore', 'pipe', 'inherit'] });
    if (r.status !== 0) {
      console.error(`bench/allocations.mjs: te bench exited with ${r.status}`);
      process.exit(1);
    }
    const result = JSON.parse(r.stdout.trim().split('\n').pop());
    const byFunction = new Map();
    const walk = (node) => {
      if (node.selfSize > 0) {
        const key = frameName(node.callFrame);
        const at = byFunction.get(key) ?? { layer: layerOf(node.callFrame), bytes: 0 };
        at.bytes += node.selfSize;
        byFunction.set(key, at);
      }
      for (const c of node.children) walk(c);
    };
    walk(JSON.parse(readFileSync(profile, 'utf8')).head);
    return { result, byFunction };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const moved = (l, s) => l.result.batches > s.result.batches;
const stalled = stalledPairMessages('bench/allocations.mjs', 'batches');
const { long, short } = await runSteadyPair(run, duration, duration / 3, moved, (next) => console.error(stalled.retry(next)));
const batches = long.result.batches - short.result.batches;
if (!(batches > 0)) {
  console.error(stalled.givenUp(`last: ${long.result.batches} and ${short.result.batches}`));
  process.exit(1);
}
const functions = [];
for (const [name, { layer, bytes }] of long.byFunction) {
  const perBatch = (bytes - (short.byFunction.get(name)?.bytes ?? 0)) / batches;
  functions.push({ name, layer, bytesPerBatch: perBatch });
}
const layers = {};
for (const f of functions) layers[f.layer] = (layers[f.layer] ?? 0) + f.bytesPerBatch;
const total = functions.reduce((acc, f) => acc + f.bytesPerBatch, 0);
const report = {
  plugin: values.plugin,
  op: values.op,
  blockSize: Number(values['block-size']),
  batchSize: Number(values['batch-size']),
  concurrency: Number(values.concurrency),
  batches,
  batchesPerSecond: long.result.batches / long.result.durationS,
  bytesPerBatch: total,
  bytesPerBatchByLayer: layers,
  topFunctions: functions.sort((a, b) => b.bytesPerBatch - a.bytesPerBatch).slice(0, top),
};
const b = (n) => `${Math.round(n).toLocaleString('en-US').padStart(7)} B`;
console.log(
  `${report.plugin}: ${report.blockSize} B ${report.op}s, batches of ${report.batchSize} × ${report.concurrency} in flight; ${duration} s and ${+(duration / 3).toFixed(2)} s${QUICK ? ' (TE_BENCH_QUICK: smoke run, figures not meaningful)' : ''}`,
);
console.log(`  JS heap allocated per batch, initiator, steady state: ${b(total)}  (${batches} batches of difference)`);
for (const [layer, n] of Object.entries(layers).sort((x, y) => y[1] - x[1])) if (Math.abs(n) >= 1) console.log(`    ${layer.padEnd(50)} ${b(n)}`);
if (top > 0) console.log('  by function:');
for (const f of report.topFunctions) console.log(`    ${f.name.padEnd(70)} ${b(f.bytesPerBatch)}`);
if (values.json) console.log(JSON.stringify(report));
