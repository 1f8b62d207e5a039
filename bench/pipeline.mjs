#!/usr/bin/env node
// Per-stage latency of the EPD pipeline (`te demo`): runs it with more requests at a stated
// concurrency and prints p50/p99 of each stage over the verified requests.
//
//   node bench/pipeline.mjs [--requests 48] [--concurrency 4] [--connector mooncake-tcp] [--json]
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { quick } from './lib/quick.mjs';
import { percentile } from './lib/ranks.mjs';

const { values: args } = parseCli({
  usage: 'node bench/pipeline.mjs [options]',
  summary: 'Per-stage latency (p50/p99) of the EPD pipeline (`te demo`) over its verified requests.',
  options: {
    requests: { type: 'string', number: { integer: true, min: 1, max: 100000 }, default: '48', help: 'requests to run' },
    concurrency: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '4', help: 'requests in flight' },
    connector: { type: 'string', default: 'mooncake-tcp', help: 'te transport to use' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
  },
});
quick(args, { requests: '6' });
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const r = spawnSync(process.execPath, [te, 'demo', '--json', '--requests', args.requests, '--concurrency', args.concurrency, '--connector', args.connector], {
  encoding: 'utf8',
  maxBuffer: 64 << 20,
});
const report = JSON.parse(r.stdout.trim().split('\n').pop());
if (!report.passed) throw new Error('the pipeline did not verify every request');
const rows = report.rows.filter((x) => x.verified);
const stages = ['encodeMs', 'ecMs', 'prefillMs', 'kvMs', 'firstTokenMs', 'totalMs'];
const out = { connector: args.connector, requests: rows.length, concurrency: Number(args.concurrency), stages: {} };
for (const s of stages)
  out.stages[s] = {
    p50: percentile(
      rows.map((x) => x[s]),
      50,
    ),
    p99: percentile(
      rows.map((x) => x[s]),
      99,
    ),
  };
const log = (...a) => (args.json ? process.stderr.write(a.join(' ') + '\n') : console.log(...a));
log(`EPD pipeline over ${args.connector}: ${rows.length} verified requests at concurrency ${args.concurrency} (te demo defaults otherwise)`);
for (const s of stages)
  log(`  ${s.replace('Ms', '').padEnd(11)} p50 ${out.stages[s].p50.toFixed(1).padStart(7)} ms   p99 ${out.stages[s].p99.toFixed(1).padStart(7)} ms`);
if (args.json) console.log(JSON.stringify(out));
