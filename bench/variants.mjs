#!/usr/bin/env node
// A/B of transport settings: runs chosen loopback cases under several environment variants,
// alternating variant by variant inside each round (so every variant sees the same minute of
// the host), and prints each variant's median over rounds and its ratio to the first
// variant, paired round by round. Settings are chosen by environment variables, which every
// plugin option reads (TE_TCP_*, TE_RDMA_*, ...).
//
//   node bench/variants.mjs --plugin mooncake-tcp \
//     --case 64k:write:4x4 --case 1m:write:1x4 \
//     --variant default= --variant busy100=TE_TCP_BUSY_POLL_US=100 \
//     [--rounds 3] [--duration 1] [--json out.json]
//
// A case is SIZE:OP:BATCHxCONCURRENCY (SIZE in bytes or with k/m). A variant is NAME=, or
// NAME=VAR=VALUE[,VAR=VALUE...]. Every run is `te bench --loopback --verify`: bytes checked
// by sha256 on both sides; an unverified run fails the whole comparison.
import { writeFileSync } from 'node:fs';
import { parseCli } from '../scripts/lib/cli.mjs';
import { QUICK } from './lib/quick.mjs';
import { runTeBench } from './lib/te-bench.mjs';
import { median } from './lib/ranks.mjs';

function fail(message) {
  console.error(`bench/variants.mjs: ${message}`);
  process.exit(2);
}

let values;
try {
  ({ values } = parseCli({
    usage: 'node bench/variants.mjs [options]',
    summary:
      "A/B of transport settings: loopback cases under environment variants, alternating inside each round; each variant's median and its ratio to the first.",

    options: {
      plugin: { type: 'string', default: 'mooncake-tcp', help: 'te transport to run' },
      case: { type: 'string', multiple: true, default: ['64k:write:4x4'], help: 'SIZE:write|read:BATCHxCONCURRENCY, e.g. 64k:write:4x4 (repeatable)' },
      variant: {
        type: 'string',
        multiple: true,
        default: ['default='],
        help: 'NAME= or NAME=VAR=VALUE[,VAR=VALUE...] (repeatable; the first is the reference)',
      },
      rounds: { type: 'string', number: { integer: true, min: 1, max: 50 }, default: '3', help: 'rounds' },
      duration: { type: 'string', number: { above: 0, max: 3600 }, default: '1', help: 'seconds per run' },
      json: { type: 'string', help: 'write the results as JSON to this file' },
    },
  }));
} catch (e) {
  fail(e.message.split('\n')[0]);
}

function parseSize(text) {
  const m = /^(\d+)([km]?)$/i.exec(text);
  if (!m) fail(`bad size '${text}' (bytes, or a number with k or m)`);
  return Number(m[1]) * { '': 1, k: 1024, m: 1024 * 1024 }[m[2].toLowerCase()];
}

function parseCase(text) {
  const m = /^([^:]+):(write|read):(\d+)x(\d+)$/.exec(text);
  if (!m) fail(`bad case '${text}': SIZE:write|read:BATCHxCONCURRENCY, e.g. 64k:write:4x4`);
  return { text, size: parseSize(m[1]), op: m[2], batch: Number(m[3]), concurrency: Number(m[4]) };
}

function parseVariant(text) {
  const eq = text.indexOf('=');
  if (eq <= 0) fail(`bad variant '${text}': NAME= or NAME=VAR=VALUE[,VAR=VALUE...]`);
  const env = {};
  for (const pair of text
    .slice(eq + 1)
    .split(',')
    .filter(Boolean)) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(pair);
    if (!m) fail(`bad setting '${pair}' in variant '${text}': VAR=VALUE`);
    env[m[1]] = m[2];
  }
  return { name: text.slice(0, eq), env };
}

// A smoke run (TE_BENCH_QUICK) keeps the first case and the first two variants.
const cases = values.case.map(parseCase).slice(0, QUICK ? 1 : undefined);
const variants = values.variant.map(parseVariant).slice(0, QUICK ? 2 : undefined);
// --rounds and --duration were checked as given by parseCli, before a smoke run replaces them.
const rounds = QUICK ? 1 : Number(values.rounds);
const duration = QUICK ? 0.3 : Number(values.duration);

function run(c, v) {
  let r;
  try {
    r = runTeBench(values.plugin, c, duration, v.env);
  } catch (e) {
    // te bench said why on stderr (inherited); this names the run.
    fail(`${c.text} under ${v.name} (${JSON.stringify(v.env)}): te bench exited with ${e.status ?? e.signal ?? e.message}`);
  }
  if (!r.verified) fail(`${c.text} under ${v.name}: not verified`);
  return r;
}

const runs = new Map(); // `${case}|${variant}` -> one result per round
for (let round = 1; round <= rounds; round++) {
  for (const c of cases) {
    // The variants' order turns each round, so no variant always runs first.
    for (let i = 0; i < variants.length; i++) {
      const v = variants[(i + round - 1) % variants.length];
      const r = run(c, v);
      const key = `${c.text}|${v.name}`;
      if (!runs.has(key)) runs.set(key, []);
      runs.get(key).push(r);
      console.error(`round ${round}: ${c.text} ${v.name}: ${(r.bytesPerSecond / 1e9).toFixed(2)} GB/s, ${Math.round(r.requestsPerSecond)} req/s`);
    }
  }
}

console.log(`${values.plugin}, ${rounds} round(s) of ${duration} s per run, variants alternating; every run verified`);
console.log('| case | variant | GB/s (median) | req/s | p99 µs | × first variant [spread] |');
console.log('|---|---|---|---|---|---|');
const summary = [];
for (const c of cases) {
  const base = runs.get(`${c.text}|${variants[0].name}`);
  for (const v of variants) {
    const rs = runs.get(`${c.text}|${v.name}`);
    const ratios = rs.map((r, i) => r.bytesPerSecond / base[i].bytesPerSecond);
    const row = {
      case: c.text,
      variant: v.name,
      env: v.env,
      bytesPerSecond: median(rs.map((r) => r.bytesPerSecond)),
      requestsPerSecond: median(rs.map((r) => r.requestsPerSecond)),
      p99Us: median(rs.map((r) => r.p99Us)),
      ratio: median(ratios),
      ratioMin: Math.min(...ratios),
      ratioMax: Math.max(...ratios),
      perRound: rs.map((r) => r.bytesPerSecond),
    };
    summary.push(row);
    console.log(
      `| ${c.text} | ${v.name} | ${(row.bytesPerSecond / 1e9).toFixed(2)} | ${Math.round(row.requestsPerSecond).toLocaleString('en')} | ${row.p99Us.toFixed(0)} | ${row.ratio.toFixed(2)} [${row.ratioMin.toFixed(2)}–${row.ratioMax.toFixed(2)}] |`,
    );
  }
}
if (values.json) writeFileSync(values.json, JSON.stringify({ plugin: values.plugin, rounds, duration, results: summary }, null, 2));
