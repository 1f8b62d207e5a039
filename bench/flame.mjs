#!/usr/bin/env node
// Profiles one `te bench --loopback` case with Linux perf (both processes, call graphs,
// JS frames named through --perf-basic-prof in the initiator) and writes a flame graph.
//
//   node bench/flame.mjs [--plugin mooncake-tcp] [--op write] [--block-size 65536]
//                        [--batch-size 4] [--concurrency 4] [--seconds 3] [--out flame.svg]
//
// Needs perf (Debian: apt-get install -y linux-perf) and permission to profile the
// processes (root, or kernel.perf_event_paranoid ≤ 1).
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { foldPerfScript, renderFlameGraph } from './lib/flamegraph.mjs';
import { QUICK } from './lib/quick.mjs';

const { values } = parseCli({
  usage: 'node bench/flame.mjs [options]',
  summary: 'Profiles one `te bench --loopback` case with Linux perf (both processes) and writes a flame graph (SVG).',
  notes: 'Needs perf (apt-get install -y linux-perf) and permission to profile (root, or kernel.perf_event_paranoid <= 1).',
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp', help: 'te transport to profile' },
    op: { type: 'string', default: 'write', help: 'write or read' },
    'block-size': { type: 'string', number: { integer: true, min: 1, max: 1073741824 }, default: '65536', help: 'bytes per request' },
    'batch-size': { type: 'string', number: { integer: true, min: 1, max: 1000000 }, default: '4', help: 'requests per batch' },
    concurrency: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '4', help: 'batches in flight' },
    seconds: { type: 'string', number: { above: 0, max: 3600 }, default: '3', help: 'seconds profiled' },
    out: { type: 'string', default: 'flame.svg', help: 'SVG file to write' },
  },
});
const seconds = QUICK ? 1 : Number(values.seconds);
try {
  execFileSync('perf', ['--version'], { stdio: 'ignore' });
} catch {
  throw new Error('perf is not installed: apt-get install -y linux-perf');
}
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const args = [
  '--perf-basic-prof',
  te,
  'bench',
  '--loopback',
  '--json',
  '--plugin',
  values.plugin,
  '--op',
  values.op,
  '--block-size',
  values['block-size'],
  '--batch-size',
  values['batch-size'],
  '--concurrency',
  values.concurrency,
  '--duration',
  String(seconds + 2),
];
const bench = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
let stdout = '';
bench.stdout.on('data', (d) => (stdout += d));
const exited = new Promise((resolve) => bench.on('exit', resolve));

// The target is the initiator's child; profile both once the timed run is under way.
await new Promise((r) => setTimeout(r, 1500));
const children = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    return [];
  }
};
const pids = [String(bench.pid), ...children(bench.pid)];
const dir = mkdtempSync(join(tmpdir(), 'te-flame-'));
try {
  const data = join(dir, 'perf.data');
  execFileSync('perf', ['record', '-F', '499', '-g', '-p', pids.join(','), '-o', data, '--', 'sleep', String(seconds)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const code = await exited;
  if (code !== 0) throw new Error(`te bench exited with ${code}`);
  const result = JSON.parse(stdout.trim().split('\n').pop());
  const script = execFileSync('perf', ['script', '-i', data, '-F', 'comm,ip,sym,dso'], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const folded = foldPerfScript(script);
  const title = `${values.plugin} ${values.op} ${values['block-size']} B, batches of ${values['batch-size']} × ${values.concurrency}: ${(result.bytesPerSecond / 1e9).toFixed(2)} GB/s, ${Math.round(result.requestsPerSecond).toLocaleString('en')} req/s (both processes, perf ${seconds} s)`;
  writeFileSync(values.out, renderFlameGraph(folded, { title }));
  // A text summary beside the picture: the hottest frames by self samples, per thread name.
  const self = new Map();
  let total = 0;
  for (const [stack, n] of folded) {
    const frames = stack.split(';');
    const leaf = frames[frames.length - 1].split('\u0001');
    const key = `${frames[0].padEnd(14)} ${leaf[0]} (${leaf[1]})`;
    self.set(key, (self.get(key) ?? 0) + n);
    total += n;
  }
  console.log(title);
  console.log(`wrote ${values.out}; hottest frames (self samples of ${total}):`);
  for (const [k, n] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`  ${((100 * n) / total).toFixed(1).padStart(5)}%  ${k}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
  for (const pid of pids) rmSync(`/tmp/perf-${pid}.map`, { force: true });
}
