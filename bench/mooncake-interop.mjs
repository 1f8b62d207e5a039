#!/usr/bin/env node
// te beside the real Mooncake Transfer Engine (transfer_engine_bench, TCP build), in one run:
//   1. a Mooncake initiator writing into a Mooncake target      (baseline)
//   2. the same Mooncake initiator writing into a te target     (te bench --mode target --wire mooncake)
//   3. te writing into the Mooncake target                      (te bench --wire mooncake --verify)
// at 1 MiB and 64 KiB, batch 128, one submitting thread, with Mooncake's default of one
// connection per request and with its connection pool (MC_TCP_ENABLE_CONNECTION_POOL=1).
// Rounds alternate the targets; medians are printed with te's figure as a ratio of the
// baseline. Both targets are separate processes started once, so they see the same machine.
//
// Verification: after every run into the te target, the te target's addressed range must hash
// like the initiator's buffer (zeros: this build does not fill it), and it is randomised before
// each run, so the check covers the timed bytes; a Mooncake initiator reports a failed request
// by exiting non-zero. te's own run (3) reads everything back and compares (--verify).
//
//   node bench/mooncake-interop.mjs [--seconds 3] [--rounds 3] [--json]
//   TE_BENCH_QUICK=1 node bench/mooncake-interop.mjs      smoke run (64 KiB, 1 round, 1 s)
// Needs the binary at ../shared/mooncake-te (or $TE_MOONCAKE_TE_DIR) and its runtime libraries.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { ControlClient } from '@te/connector';
import { checkTargetHolds } from './lib/mooncake-verify.mjs';
import { QUICK, quick } from './lib/quick.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dir = process.env.TE_MOONCAKE_TE_DIR ?? join(root, '..', 'shared', 'mooncake-te');
const BIN = join(dir, 'transfer_engine_bench');
const TE = join(root, 'packages', 'cli', 'bin', 'te.js');

const { values } = parseCli({
  usage: 'node bench/mooncake-interop.mjs [options]',
  summary:
    'te beside the real Mooncake Transfer Engine (transfer_engine_bench, TCP): Mooncake into Mooncake (the baseline), Mooncake into a te target, te into the Mooncake target; 1 MiB and 64 KiB, batch 128.',
  notes: 'The Mooncake binary is looked up in $TE_MOONCAKE_TE_DIR (default ../shared/mooncake-te).',
  options: {
    seconds: { type: 'string', number: { above: 0, max: 3600 }, default: '3', help: 'seconds per timed run (1 to 60)' },
    rounds: { type: 'string', number: { integer: true, min: 1, max: 100 }, default: '3', help: 'rounds alternating the targets (1 to 20; medians reported)' },
    json: { type: 'boolean', default: false, help: 'print the rows as JSON' },
  },
});
quick(values, { seconds: '1', rounds: '1' });
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
if (!(SECONDS >= 1 && Number.isInteger(SECONDS) && SECONDS <= 60)) fail(2, '--seconds must be an integer from 1 to 60');
if (!(ROUNDS >= 1 && Number.isInteger(ROUNDS) && ROUNDS <= 20)) fail(2, '--rounds must be an integer from 1 to 20');

function fail(code, message) {
  console.error(`mooncake-interop: ${message}`);
  process.exit(code);
}

if (!existsSync(BIN)) fail(3, `no Mooncake binary at ${BIN} (set TE_MOONCAKE_TE_DIR)`);
const missing = (spawnSync('ldd', [BIN], { encoding: 'utf8' }).stdout ?? '').split('\n').filter((l) => l.includes('not found'));
if (missing.length) fail(3, `${BIN} lacks runtime libraries (.ci/run installs them):\n${missing.join('\n')}`);

const BATCH = 128;
const CASES = QUICK ? [64 << 10] : [1 << 20, 64 << 10];
const MODES = [
  { name: 'per request', env: {} },
  { name: 'pooled', env: { MC_TCP_ENABLE_CONNECTION_POOL: '1' } },
];
const REGION = Math.max(...CASES) * BATCH;
const env = { ...process.env, GLOG_logtostderr: '1' };

function startMooncakeTarget() {
  const p = spawn(
    BIN,
    [
      '--mode=target',
      '--protocol=tcp',
      '--metadata_server=P2PHANDSHAKE',
      '--local_server_name=127.0.0.1',
      `--buffer_size=${REGION}`,
      '--threads=1',
      `--batch_size=${BATCH}`,
      `--block_size=${Math.max(...CASES)}`,
    ],
    { env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  return new Promise((res, rej) => {
    const on = (c) => {
      log += c;
      const m = /listening on (\S+:\d+)/.exec(log);
      if (m && /DRAM is used/.test(log)) res({ segment: m[1], stop: () => p.kill('SIGTERM') });
    };
    p.stdout.on('data', on);
    p.stderr.on('data', on);
    p.once('exit', (code) => rej(new Error(`Mooncake target exited ${code}:\n${log}`)));
  });
}

function startTeTarget() {
  const p = spawn(process.execPath, [TE, 'bench', '--mode', 'target', '--wire', 'mooncake', '--bytes', String(REGION), '--exit-with-parent'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  return new Promise((res, rej) => {
    createInterface({ input: p.stdout }).on('line', (line) => {
      try {
        const m = JSON.parse(line);
        if (m.ready) res({ segment: m.ready, control: new ControlClient(m.segment), stop: () => p.stdin.end() });
      } catch {
        // not ours
      }
    });
    p.once('exit', (code) => rej(new Error(`te target exited ${code}`)));
  });
}

function runMooncakeInitiator(segment, block, modeEnv) {
  const args = [
    '--mode=initiator',
    '--protocol=tcp',
    '--metadata_server=P2PHANDSHAKE',
    '--local_server_name=127.0.0.1',
    `--segment_id=${segment}`,
    '--operation=write',
    `--block_size=${block}`,
    `--batch_size=${BATCH}`,
    '--threads=1',
    `--duration=${SECONDS}`,
    `--buffer_size=${block * BATCH}`,
    '--report_precision=4',
  ];
  const r = spawnSync(BIN, args, { env: { ...env, ...modeEnv }, encoding: 'utf8', timeout: (SECONDS + 60) * 1000 });
  const m = /throughput ([\d.]+) GB\/s/.exec(r.stderr + r.stdout);
  if (r.status !== 0 || !m) throw new Error(`Mooncake initiator into ${segment} failed (exit ${r.status}):\n${(r.stderr + r.stdout).slice(-2000)}`);
  return Number(m[1]);
}

function runTeInitiator(segment, block, modeEnv) {
  const pool = modeEnv.MC_TCP_ENABLE_CONNECTION_POOL === '1';
  const r = spawnSync(
    process.execPath,
    [
      TE,
      'bench',
      '--wire',
      'mooncake',
      '--target',
      segment,
      '--block-size',
      String(block),
      '--batch-size',
      String(BATCH),
      '--concurrency',
      '1',
      '--duration',
      String(SECONDS),
      '--verify',
      '--json',
      '--option',
      `connectionPool=${pool}`,
    ],
    { encoding: 'utf8', timeout: (SECONDS + 60) * 1000 },
  );
  if (r.status !== 0) throw new Error(`te bench --wire mooncake failed (exit ${r.status}):\n${r.stderr}`);
  const res = JSON.parse(r.stdout.trim().split('\n').pop());
  if (!res.verified) throw new Error('te bench did not verify');
  return res.bytesPerSecond / 1e9;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const mc = await startMooncakeTarget();
const te = await startTeTarget();
const rows = [];
try {
  for (const block of CASES) {
    for (const mode of MODES) {
      const figures = { mcIntoMc: [], mcIntoTe: [], teIntoMc: [] };
      const range = { offset: 0n, length: BigInt(block * BATCH) };
      for (let round = 0; round < ROUNDS; round++) {
        figures.mcIntoMc.push(runMooncakeInitiator(mc.segment, block, mode.env));
        await te.control.request('te.bench.randomize', range, 60_000);
        figures.mcIntoTe.push(runMooncakeInitiator(te.segment, block, mode.env));
        await checkTargetHolds(te.control, new Uint8Array(block * BATCH), `after a Mooncake initiator's run (${block} B, ${mode.name})`);
        figures.teIntoMc.push(runTeInitiator(mc.segment, block, mode.env));
      }
      const row = {
        block,
        batch: BATCH,
        mode: mode.name,
        mooncakeIntoMooncake: median(figures.mcIntoMc),
        mooncakeIntoTe: median(figures.mcIntoTe),
        teIntoMooncake: median(figures.teIntoMc),
        rounds: ROUNDS,
        seconds: SECONDS,
      };
      rows.push(row);
      if (!values.json) {
        const kib = block >= 1 << 20 ? `${block >> 20} MiB` : `${block >> 10} KiB`;
        console.log(
          `${kib.padStart(7)} x${BATCH} ${mode.name.padEnd(11)}  Mooncake->Mooncake ${row.mooncakeIntoMooncake.toFixed(3)} GB/s   Mooncake->te ${row.mooncakeIntoTe.toFixed(3)} GB/s (${(row.mooncakeIntoTe / row.mooncakeIntoMooncake).toFixed(2)}x)   te->Mooncake ${row.teIntoMooncake.toFixed(3)} GB/s (${(row.teIntoMooncake / row.mooncakeIntoMooncake).toFixed(2)}x, verified)`,
        );
      }
    }
  }
} finally {
  te.control.close();
  te.stop();
  mc.stop();
}
if (values.json) console.log(JSON.stringify(rows));
