#!/usr/bin/env node
// System calls per request of a real `te bench --loopback` run, both processes together,
// counted by strace. On a virtual machine a system call costs 1–2 µs, as much as copying a
// few kilobytes, so the count per request is a speed figure that does not move with the
// load of the host, unlike GB/s.
//
// Each case runs twice under `strace -f -c`, for a longer and a short timed period. The
// difference of the two counts divided by the difference of the requests is the steady
// state: start-up, registration and the verification pass cancel out. A pair whose longer
// run moved no more requests (a stalled host) is run again, up to 3 pairs.
//
//   node bench/syscalls.mjs [--plugin mooncake-tcp] [--json]
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { QUICK } from './lib/quick.mjs';
import { runSteadyPair, stalledPairMessages } from './lib/steady-state.mjs';

const { values } = parseCli({
  usage: 'node bench/syscalls.mjs [options]',
  summary: 'System calls per request of a real `te bench --loopback` run (both processes), counted by strace as the difference of a short and a long run.',
  notes: 'Needs strace (apt-get install -y strace) and ptrace allowed.',
  options: {
    plugin: { type: 'string', default: 'mooncake-tcp', help: 'te transport to count' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
  },
});
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const KiB = 1024;
const MiB = 1024 * KiB;
const ALL = [
  { op: 'write', size: 4 * KiB, batch: 64 },
  { op: 'write', size: 64 * KiB, batch: 128 },
  { op: 'read', size: 64 * KiB, batch: 128 },
  { op: 'write', size: MiB, batch: 1 },
  { op: 'read', size: MiB, batch: 1 },
];
// A smoke run keeps one case whose batches are single requests: the steady state is the
// difference of two runs' request counts, which only move by whole batches, and under strace
// on a loaded 2-core machine a 1 s and a 2 s run of 128-request batches once completed the
// same number.
const CASES = QUICK ? ALL.slice(3, 4) : ALL;
const [SHORT_S, LONG_S] = QUICK ? [1, 2] : [1, 4];
/** The calls reported, grouped by what they do on the data path. */
const GROUPS = {
  receive: ['recvfrom', 'recvmsg', 'recv', 'readv'],
  send: ['sendto', 'sendmsg', 'writev', 'send'],
  'wake (eventfd/pipe)': ['write', 'read'],
  'epoll wait': ['epoll_wait', 'epoll_pwait', 'epoll_pwait2'],
  getsockopt: ['getsockopt'],
};
// futex is left out of every figure: V8's and libuv's helper threads (garbage collection,
// the hashing of the verification pass) make most of them, in counts that differ from run
// to run by more than the data path's share, so the difference of two runs is noise.
const NOISE = new Set(['futex']);

try {
  execFileSync('strace', ['-V'], { stdio: 'ignore' });
} catch {
  console.error('bench/syscalls.mjs needs strace (apt-get install -y strace)');
  process.exit(2);
}

/** Calls by name and the bench result of one run of `seconds`. */
function traced(c, seconds) {
  const dir = mkdtempSync(join(tmpdir(), 'te-syscalls-'));
  try {
    const out = join(dir, 'strace.txt');
    const args = [
      '-f',
      '-c',
      '-o',
      out,
      process.execPath,
      te,
      'bench',
      '--loopback',
      '--json',
      '--plugin',
      values.plugin,
      '--op',
      c.op,
      '--block-size',
      String(c.size),
      '--batch-size',
      String(c.batch),
      '--concurrency',
      '4',
      '--duration',
      String(seconds),
    ];
    const r = spawnSync('strace', args, {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, FI_PROVIDER: process.env.FI_PROVIDER ?? 'tcp;ofi_rxm' },
    });
    if (r.status !== 0) throw new Error(`te bench under strace exited with ${r.status}`);
    const result = JSON.parse(r.stdout.trim().split('\n').pop());
    const calls = {};
    for (const line of readFileSync(out, 'utf8').split('\n')) {
      // "% time  seconds  usecs/call  calls  [errors]  syscall"
      const f = line.trim().split(/\s+/);
      if (f.length >= 5 && /^\d/.test(f[0]) && f[f.length - 1] !== 'total') calls[f[f.length - 1]] = Number(f[3]);
    }
    return { calls, requests: result.requests };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Calls per request in the steady state of each case. */
async function measureAll() {
  const rows = [];
  for (const c of CASES) {
    const name = `${c.size >= MiB ? `${c.size / MiB} MiB` : `${c.size / KiB} KiB`} ${c.op} (${c.batch} × 4)`;
    console.error(`${values.plugin}: ${name} ...`);
    const moved = (long, short) => long.requests > short.requests;
    const stalled = stalledPairMessages(name, 'requests');
    const { long: b, short: a } = await runSteadyPair(
      (seconds) => traced(c, seconds),
      LONG_S,
      SHORT_S,
      moved,
      (next) => console.error(stalled.retry(next)),
    );
    const requests = b.requests - a.requests;
    if (!(requests > 0)) throw new Error(stalled.givenUp(`last: ${b.requests} in ${LONG_S} s, ${a.requests} in ${SHORT_S} s`));
    const per = (names) => names.reduce((s, n) => s + ((b.calls[n] ?? 0) - (a.calls[n] ?? 0)), 0) / requests;
    const groups = Object.fromEntries(Object.entries(GROUPS).map(([g, names]) => [g, per(names)]));
    const total = per(Object.keys({ ...a.calls, ...b.calls }).filter((n) => !NOISE.has(n)));
    rows.push({ plugin: values.plugin, case: name, requests, perRequest: groups, totalPerRequest: total });
  }
  return rows;
}

let rows;
try {
  rows = await measureAll();
} catch (e) {
  console.error(`bench/syscalls.mjs: ${e.message}`);
  process.exit(1);
}

if (values.json) {
  console.log(JSON.stringify(rows));
} else {
  const head = ['case', ...Object.keys(GROUPS), 'all but futex'];
  const table = [head, ...rows.map((r) => [r.case, ...Object.values(r.perRequest).map((v) => v.toFixed(2)), r.totalPerRequest.toFixed(2)])];
  const widths = head.map((_, i) => Math.max(...table.map((t) => t[i].length)));
  console.log(
    `${values.plugin}: system calls per request, both processes (strace -f -c; steady state of a ${LONG_S} s run less a ${SHORT_S} s run)${QUICK ? ' (smoke run: figures not meaningful)' : ''}`,
  );
  for (const t of table) console.log(t.map((v, i) => (i === 0 ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join('  '));
}
