#!/usr/bin/env node
// Chaos soak of the disaggregation runtime: PD and EC under sustained load while faults
// land on a seeded schedule, every invariant checked as rooms end.
//
// Topology (every rank its own process, mooncake-tcp on loopback):
//   2 prefill instances, attention TP 2 (2 ranks each), each with its bootstrap server in
//     its own process; the first rank of prefill instance 0 also runs the EC producer;
//   2 decode instances of 4 ranks: attention TP 2 x DP 2 (SGLang's tp 4, dp 2 with DP
//     attention); the first rank of decode instance 0 also runs the EC consumer.
// Rooms: a sustained rate, 1 to 48 pages, one-shot, chunked (2-3 chunks) or layerwise,
// some aborted by the decode or the prefill at a random moment.
// Faults (seeded): SIGKILL and restart of a prefill or decode rank, SIGSTOP/SIGCONT stalls,
// a stall past the transport's deadline, the bootstrap server's process killed and
// restarted, and (root, namespaces) a decode instance's link slowed with tbf.
// Invariants, checked as each room ends: every rank answers each room exactly once and its
// status never moves after it ended; every failure names its room (details.room); every
// Success is byte-exact; a prefill rank and the decode rank it wrote to do not disagree
// (one Success, the other Failed); a failed room's pages (not flagged pagesMayBeWritten)
// do not change afterwards; a restarted rank or bootstrap server serves again; after the
// load, every runtime table is empty again and RSS and descriptors are back near their
// baseline.
//   node scripts/chaos.mjs [--quick] [--duration 1800] [--seed 1] [--rate 12] [--no-netns] [--checksums] [--json]
// --checksums: KV and EC checksums on (TE_KV_CHECKSUMS=1 in every rank): any DATA_CORRUPTED
// is then a false positive or a real corruption, both broken invariants.
// --duration: seconds of load, after the processes started (about 20 s) and before the
// drain (about 20 s); --quick: 90 s, about 2 min 15 s in all. --json: the last line of output is the report as JSON. Exit status 0
// only when no invariant broke. Needs the built packages (npm run build).
import { fileURLToPath } from 'node:url';
import { parseCli } from './lib/cli.mjs';
import { judgeRoom } from './chaos/judge.mjs';
import { prng } from './chaos/pattern.mjs';
import { Namespace, netnsSupport } from './chaos/netns.mjs';
import { PagePool } from './chaos/page-pool.mjs';
import { buildTopology } from './chaos/topology.mjs';
import { checkAfterLoad, latencySummary, newReport, printReport } from './chaos/report.mjs';

const { values: opt } = parseCli({
  usage: 'node scripts/chaos.mjs [options]',
  summary:
    'Chaos soak of the disaggregation runtime: PD and EC across 14 processes under load while ranks are killed, stalled and restarted, bootstrap servers restarted and a link slowed; exit 0 only when no invariant broke.',
  options: {
    quick: { type: 'boolean', default: false, help: 'a 90 s run (about 2 min 15 s in all)' },
    duration: { type: 'string', number: { above: 20, max: 86400 }, help: 'seconds of load (more than 20; default 1800, or 90 with --quick)' },
    seed: { type: 'string', number: { integer: true }, default: '1', help: 'seed of the fault schedule (an integer)' },
    rate: { type: 'string', number: { above: 0, max: 10000 }, default: '12', help: 'rooms started per second' },
    'no-netns': { type: 'boolean', default: false, help: 'no network namespaces (no slowed link)' },
    checksums: { type: 'boolean', default: false, help: 'KV and EC checksums on in every rank' },
    json: { type: 'boolean', default: false, help: 'the last line of output is the report as JSON' },
    verbose: { type: 'boolean', default: false, help: "log every room and fault, with the ranks' stderr" },
  },
});
const DURATION_S = Number(opt.duration ?? (opt.quick ? 90 : 1800));
const SEED = Number(opt.seed);
const RATE = Number(opt.rate);
if (!(DURATION_S > 20) || !Number.isInteger(SEED) || !(RATE > 0)) {
  console.error('usage: node scripts/chaos.mjs [--quick] [--duration seconds>20] [--seed integer] [--rate rooms/s] [--no-netns] [--json]');
  process.exit(2);
}
const MODEL = { layers: 4, heads: 4, headBytes: 64, pageSize: 16, pages: 384, auxSlots: 64, auxItem: 64, ecSlots: 4, ecItem: 64 << 10 };
// Short enough that a fault's rooms end within seconds, long enough for a loaded 2-core host.
const TIMEOUTS = { bootstrapMs: 8_000, waitingMs: 10_000, heartbeatMs: 500, heartbeatMaxFailures: 2, abortMs: 6_000, transferMs: 3_000 };
// The most a room may take to end on a rank (every timeout it can run into, plus slack).
const ROOM_END_MS = TIMEOUTS.bootstrapMs + TIMEOUTS.waitingMs + TIMEOUTS.abortMs + 10_000;
/** How every rank and bootstrap server starts, and how long a call to one may take. */
const LAUNCH = {
  script: fileURLToPath(new URL('./chaos/worker.mjs', import.meta.url)),
  env: opt.checksums ? { TE_KV_CHECKSUMS: '1' } : {},
  verbose: opt.verbose,
  callTimeoutMs: ROOM_END_MS + 30_000,
};
// Pages a failed write may still land in are handed out again only after this long.
const QUARANTINE_MS = 30_000;
const WARMUP_MS = Math.min(15_000, DURATION_S * 150);
const MAX_IN_FLIGHT = 48;
const rand = prng(SEED);
const log = (...a) => (opt.verbose ? console.error(`[${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...a) : undefined);
const t0 = Date.now();
/** When the load started (every process up). */
let tRun = t0;

// ---------------------------------------------------------------------------- topology
const useNetns = !opt['no-netns'] && netnsSupport() === true;
const ns = useNetns ? new Namespace(`techaos${process.pid % 10000}`) : undefined;
const HOST = ns ? ns.hostIp : '127.0.0.1';
const bootstraps = [];
const prefills = []; // [instance][tp]
const decodes = []; // [instance][dp][tp]

function build() {
  return buildTopology({ host: HOST, ns, model: MODEL, timeouts: TIMEOUTS, launch: LAUNCH }, { bootstraps, prefills, decodes });
}

const allProcs = () => [...bootstraps, ...prefills.flat(), ...decodes.flat(2)];

// ---------------------------------------------------------------------------- page pools
const prefillPages = [new PagePool(MODEL.pages), new PagePool(MODEL.pages)];
const decodePages = [
  [new PagePool(MODEL.pages), new PagePool(MODEL.pages)],
  [new PagePool(MODEL.pages), new PagePool(MODEL.pages)],
];
const prefillAux = [new PagePool(MODEL.auxSlots), new PagePool(MODEL.auxSlots)];
const decodeAux = [
  [new PagePool(MODEL.auxSlots), new PagePool(MODEL.auxSlots)],
  [new PagePool(MODEL.auxSlots), new PagePool(MODEL.auxSlots)],
];

// ---------------------------------------------------------------------------- report state
const report = newReport({ seed: SEED, netns: useNetns, checksums: opt.checksums });
const latencies = [];
function violation(what) {
  report.invariantViolations++;
  if (report.violations.length < 50) report.violations.push(what);
  log('VIOLATION', what);
}
const bump = (o, k) => (o[k] = (o[k] ?? 0) + 1);

// ---------------------------------------------------------------------------- rooms
let inFlight = 0;
const roomsDone = new Set();

async function startRoom() {
  const plan = drawRoom();
  if (!plan) return;
  const pages = takePages(plan);
  if (!pages) return;
  countRoomStart(plan);
  inFlight++;
  const outcome = await runRoom(plan, pages);
  judge(plan, outcome);
  await givePagesBack(plan, pages, outcome);
  inFlight--;
}

/** The next room's instances and shape, from the seeded schedule; undefined when no instance pair is up. */
function drawRoom() {
  const upAll = (ranks) => ranks.every((r) => r.state === 'up' || r.state === 'stopped');
  const pChoices = [0, 1].filter((i) => upAll(prefills[i]) && bootstraps[i].state === 'up');
  const dChoices = [];
  for (let i = 0; i < 2; i++) for (let g = 0; g < 2; g++) if (upAll(decodes[i][g])) dChoices.push([i, g]);
  if (pChoices.length === 0 || dChoices.length === 0) return undefined;
  const P = rand.pick(pChoices);
  const [D, G] = rand.pick(dChoices);
  const size = rand.next();
  const n = size < 0.6 ? rand.int(1, 4) : size < 0.9 ? rand.int(5, 16) : rand.int(17, 48);
  const modeRoll = rand.next();
  const mode = modeRoll < 0.5 ? 'oneshot' : modeRoll < 0.8 ? 'chunked' : 'layerwise';
  const chunks = mode === 'chunked' ? Math.min(n, rand.int(2, 3)) : 1;
  const abortRoll = rand.next();
  const abortSide = abortRoll < 0.04 ? 'decode' : abortRoll < 0.08 ? 'prefill' : undefined;
  // Most rooms take tens of milliseconds: an abort soon after the start lands mid-room.
  const abortAfterMs = abortSide ? rand.int(0, 40) : undefined;
  const key = rand.u63().toString();
  return { P, D, G, n, mode, chunks, abortSide, abortAfterMs, key };
}

/** The room's pages and aux slots on both sides; undefined, with nothing taken, when a pool is short. */
function takePages({ P, D, G, n }) {
  const src = prefillPages[P].take(n);
  const dst = decodePages[D][G].take(n);
  const auxSrc = prefillAux[P].take(1);
  const auxDst = decodeAux[D][G].take(1);
  if (src && dst && auxSrc && auxDst) return { src, dst, auxSrc, auxDst };
  if (src) prefillPages[P].give(src);
  if (dst) decodePages[D][G].give(dst);
  if (auxSrc) prefillAux[P].give(auxSrc);
  if (auxDst) decodeAux[D][G].give(auxDst);
  return undefined;
}

function countRoomStart({ mode, abortSide }) {
  if (abortSide) {
    report.abortsInjected[abortSide]++;
    report.faultsInjected++;
    bump(report.faultsByKind, `abort-${abortSide}`);
  }
  if (mode === 'layerwise') report.layerwiseRooms++;
  if (mode === 'chunked') report.chunkedRooms++;
  report.roomsStarted++;
}

/** Sends the room from every prefill rank and receives it on every decode rank; how it ended on each rank that lived through it. */
async function runRoom({ P, D, G, mode, chunks, abortSide, abortAfterMs, key }, { src, dst, auxSrc, auxDst }) {
  const pRanks = prefills[P];
  const dRanks = decodes[D][G];
  const sendArgs = { room: key, pages: src, auxSlot: auxSrc[0], mode, chunks, endMs: ROOM_END_MS, ...(abortSide === 'prefill' ? { abortAfterMs } : {}) };
  const recvArgs = {
    room: key,
    pages: dst,
    auxSlot: auxDst[0],
    sendsAux: true,
    endMs: ROOM_END_MS,
    bootstrapPort: bootstraps[P].spec.port,
    ...(abortSide === 'decode' ? { abortAfterMs } : {}),
  };
  const lives = (ranks) => ranks.map((r) => r.restarts);
  const pLives = lives(pRanks);
  const dLives = lives(dRanks);
  const settle = (p) =>
    p.then(
      (v) => ({ ok: true, v }),
      (e) => ({ ok: false, e }),
    );
  const [pOut, dOut] = await Promise.all([
    Promise.all(pRanks.map((r) => settle(r.call('send', sendArgs)))),
    Promise.all(dRanks.map((r) => settle(r.call('receive', recvArgs)))),
  ]);
  // A rank that died (or restarted) during the room has no outcome for it.
  const alive = (ranks, outs, livesAt) => outs.map((o, i) => (o.ok && ranks[i].restarts === livesAt[i] ? o.v : undefined));
  return { pRanks, dRanks, dLives, ps: alive(pRanks, pOut, pLives), ds: alive(dRanks, dOut, dLives) };
}

/** The room's verdict (judge.mjs) into the report. */
function judge({ P, abortSide, key }, { pRanks, dRanks, ps, ds }) {
  report.rankOutcomesLostToKills += [...ps, ...ds].filter((x) => x === undefined).length;
  if (roomsDone.has(key)) violation(`room ${key} ended twice`);
  roomsDone.add(key);
  const verdict = judgeRoom({ key, pNames: pRanks.map((r) => r.name), dNames: dRanks.map((r) => r.name), ps, ds, abortSide, roomEndMs: ROOM_END_MS });
  for (const v of verdict.violations) violation(v);
  report.wrongBytes += verdict.wrongBytes;
  report.successUndelivered += verdict.successUndelivered;
  report.abortedAfterPrefillSuccess += verdict.abortedAfterPrefillSuccess;
  if (verdict.succeeded) {
    report.roomsCompleted++;
    latencies.push(Math.max(...ds.map((d) => d.ms)));
    const now = Date.now();
    for (const r of [...pRanks, ...dRanks, bootstraps[P]]) r.lastSuccessAt = now;
  } else {
    report.roomsFailed++;
    bump(report.failedByCause, verdict.cause);
  }
}

/**
 * The prefill's pages go back at once (every write of the room settled: the worker waited
 * for it). A failed room's decode pages must not change after it failed (checked a moment
 * later); pages a write may still land in are held back well past every deadline.
 */
async function givePagesBack({ P, D, G, key }, { src, dst, auxSrc, auxDst }, { dRanks, ds, dLives }) {
  prefillPages[P].give(src);
  prefillAux[P].give(auxSrc);
  let reuse = true;
  for (const [i, d] of ds.entries()) {
    if (!d || d.status !== 0) continue;
    if (d.pagesMayBeWritten) {
      reuse = false;
      continue;
    }
    await new Promise((r) => setTimeout(r, 1_000));
    const c = await dRanks[i].call('unchanged', { room: key }, 30_000).catch(() => undefined);
    if (c?.known && !c.unchanged && dRanks[i].restarts === dLives[i])
      violation(`room ${key}: pages on ${dRanks[i].name} changed after Failed (${d.code}: ${d.message?.slice(0, 300)}) without pagesMayBeWritten`);
  }
  if (reuse) {
    decodePages[D][G].give(dst);
    decodeAux[D][G].give(auxDst);
    return;
  }
  // A write that lands later still is caught as wrong bytes of the room that gets these pages next.
  report.quarantinedPages += dst.length;
  setTimeout(() => {
    decodePages[D][G].give(dst);
    decodeAux[D][G].give(auxDst);
  }, QUARANTINE_MS).unref();
}

// ---------------------------------------------------------------------------- EC
let ecSeq = 0;
async function ecRound() {
  const producer = prefills[0][0];
  const consumer = decodes[0][0][0];
  if (producer.state !== 'up' || consumer.state !== 'up') return;
  const n = ++ecSeq;
  const hash = `chaos-${SEED}-${n}`;
  const length = rand.int(1, 16) * 4096;
  report.ec.items++;
  const saved = await producer.call('ecSave', { hash, length, seed: n }, 30_000).catch((e) => ({ code: 'PRODUCER_DIED', message: e.message }));
  if (!saved.params) {
    report.ec.failed++;
    bump(report.ec.failedByCause, saved.code);
    return;
  }
  const got = await consumer.call('ecLoad', { params: saved.params, slot: n % MODEL.ecSlots, seed: n }, 30_000).catch(() => undefined);
  if (!got) {
    report.ec.failed++;
    bump(report.ec.failedByCause, 'CONSUMER_DIED');
    return;
  }
  report.ec.loaded += got.loaded;
  report.ec.failed += got.failed.length;
  for (const c of got.failed) bump(report.ec.failedByCause, c);
  if (got.failed.includes('DATA_CORRUPTED')) violation(`EC item ${hash}: DATA_CORRUPTED (no fault of the soak corrupts bytes)`);
  if (got.wrong) {
    report.ec.wrongBytes += got.wrong;
    report.wrongBytes += got.wrong;
    violation(`EC item ${hash}: ${got.wrong} wrong bytes after it loaded`);
  }
}

// ---------------------------------------------------------------------------- faults
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// One fault at a time per process: two restarts of one rank would start two processes on
// its port, and the one no longer tracked would serve on as a stray.
const busy = new Set();

async function restart(proc, downMs) {
  if (busy.has(proc)) return;
  busy.add(proc);
  try {
    await restartNow(proc, downMs);
  } finally {
    busy.delete(proc);
  }
}

async function restartNow(proc, downMs) {
  await proc.kill();
  await sleep(downMs);
  proc.restarts++;
  // As an orchestrator does, start it again until it stays up (a start that fails says why).
  for (let attempt = 0; ; attempt++) {
    try {
      await proc.start();
      break;
    } catch (e) {
      if (attempt >= 20) {
        violation(`${proc.name} could not be restarted: ${e.message}`);
        return;
      }
      if (/EADDRINUSE|Address already in use/.test(e.message)) report.restartsRetriedForPort++;
      await sleep(1_500);
    }
  }
  proc.restartedAt = Date.now();
  proc.baseline = undefined;
}

const FAULTS = [
  ['kill-prefill', 3, async () => restart(rand.pick(prefills.flat()), rand.int(200, 1500))],
  ['kill-decode', 3, async () => restart(rand.pick(decodes.flat(2)), rand.int(200, 1500))],
  ['stall', 3, async () => stall(rand.pick([...prefills.flat(), ...decodes.flat(2)]), rand.int(300, 2_000))],
  ['deadline', 2, async () => stall(rand.pick(decodes.flat(2)), TIMEOUTS.transferMs + 1_500)],
  ['bootstrap-restart', 2, async () => restart(rand.pick(bootstraps), rand.int(100, 1000))],
  ...(ns ? [['slow-link', 2, async () => ns.slow(rand.pick(['2mbit', '8mbit', '30mbit']), rand.int(3_000, 8_000))]] : []),
];

async function stall(proc, ms) {
  if (proc.state !== 'up' || busy.has(proc)) return;
  busy.add(proc);
  proc.state = 'stopped';
  proc.signal('SIGSTOP');
  await sleep(ms);
  proc.signal('SIGCONT');
  if (proc.state === 'stopped') proc.state = 'up';
  busy.delete(proc);
}

function pickFault() {
  const total = FAULTS.reduce((n, f) => n + f[1], 0);
  let x = rand.next() * total;
  for (const f of FAULTS) if ((x -= f[1]) < 0) return f;
  return FAULTS[0];
}

// ---------------------------------------------------------------------------- run
async function sampleAll() {
  const out = new Map();
  await Promise.all(
    allProcs().map(async (p) => {
      const s = await p.call('sample', {}, 20_000).catch(() => undefined);
      if (s) out.set(p, s);
    }),
  );
  return out;
}

async function main() {
  await build();
  log('topology up');
  tRun = Date.now();
  const loadEnd = tRun + DURATION_S * 1000;
  const { rooms, faults } = await driveLoad(loadEnd);
  log('load stopped; draining', inFlight, 'rooms');
  await Promise.all(faults);
  await Promise.all(rooms);
  // Tables drain on their own: marks of aborted rooms are swept after bootstrapMs.
  await sleep(2 * TIMEOUTS.bootstrapMs + 2_000);
  const end = await sampleAll();
  const loadEndAt = Date.now();
  report.durationS = Math.round((loadEndAt - t0) / 1000);
  report.loadS = DURATION_S;
  checkAfterLoad({ procs: allProcs(), end, report, violation, loadEnd, tRun });
  report.latencyMs = latencySummary(latencies);
  if (report.roomsCompleted === 0) violation('no room completed');
  await Promise.all(allProcs().map((p) => p.close()));
}

/**
 * Until `loadEnd`: rooms at RATE (at most MAX_IN_FLIGHT at once), an EC round every 1.5 s,
 * a fault every 3 to 7 s after the warm-up (none in the last 15 s), and the processes'
 * baselines. Returns the rooms and the faults and EC rounds still running.
 */
async function driveLoad(loadEnd) {
  const faultsEnd = loadEnd - 15_000;
  const rooms = [];
  const faults = [];
  // Baselines: after the warm-up, and again for a process some time after its restart.
  let baselined = false;
  let nextBaselineAt = 0;
  let nextFaultAt = tRun + WARMUP_MS + rand.int(1_000, 4_000);
  let nextEcAt = tRun + 1_000;
  const tick = 1000 / RATE;
  let nextRoomAt = Date.now();
  while (Date.now() < loadEnd) {
    const now = Date.now();
    if (!baselined && now > tRun + WARMUP_MS) {
      baselined = true;
      for (const [p, s] of await sampleAll()) p.baseline ??= s;
    }
    if (baselined && now >= nextBaselineAt) {
      nextBaselineAt = now + 5_000;
      baselineRestarted(now);
    }
    if (now >= nextRoomAt) {
      nextRoomAt += tick;
      if (inFlight < MAX_IN_FLIGHT) rooms.push(startRoom().catch((e) => violation(`driver: ${e.stack}`)));
    }
    if (now >= nextEcAt) {
      nextEcAt = now + 1_500;
      faults.push(ecRound().catch((e) => violation(`driver (EC): ${e.stack}`)));
    }
    if (now >= nextFaultAt && now < faultsEnd) {
      faults.push(injectFault());
      nextFaultAt = now + rand.int(3_000, 7_000);
    }
    await sleep(Math.max(1, Math.min(nextRoomAt, nextEcAt) - Date.now()));
  }
  return { rooms, faults };
}

/** A restarted process gets its own baseline once it has served a while (and was not restarted or stalled meanwhile). */
function baselineRestarted(now) {
  for (const p of allProcs()) {
    if (p.baseline || !p.restartedAt || now - p.restartedAt < WARMUP_MS || p.state !== 'up' || busy.has(p)) continue;
    const life = p.restarts;
    p.call('sample', {}, 10_000).then(
      (s) => {
        if (p.restarts === life && !busy.has(p)) p.baseline ??= s;
      },
      () => undefined,
    );
  }
}

function injectFault() {
  const [kind, , run] = pickFault();
  report.faultsInjected++;
  bump(report.faultsByKind, kind);
  log('fault', kind);
  return run().catch((e) => violation(`fault ${kind}: ${e.message}`));
}

let cleaned = false;
async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  for (const p of allProcs()) {
    if (p.child && p.state !== 'down') {
      p.signal('SIGCONT');
      p.signal('SIGKILL');
    }
  }
  ns?.destroy();
}
process.on('SIGINT', () => void cleanup().then(() => process.exit(130)));
process.on('SIGTERM', () => void cleanup().then(() => process.exit(143)));
try {
  await main();
} catch (e) {
  violation(`driver: ${e.stack ?? e}`);
} finally {
  await cleanup();
}
printReport(report, opt.json);
process.exitCode = report.invariantViolations === 0 ? 0 : 1;
