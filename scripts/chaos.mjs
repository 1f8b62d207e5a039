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
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseCli } from './lib/cli.mjs';
import { freePort } from '@te/testkit';
import { judgeRoom } from './chaos/judge.mjs';
import { prng } from './chaos/pattern.mjs';
import { Namespace, netnsSupport } from './chaos/netns.mjs';

const { values: opt } = parseCli({
  usage: 'node scripts/chaos.mjs [options]',
  summary:
    'Chaos soak of the disaggregation runtime: PD and EC across 14 processes under load while ranks are killed, stalled and restarted, bootstrap servers restarted and a link slowed; exit 0 only when no invariant broke.',
  options: {
    quick: { type: 'boolean', default: false, help: 'a 90 s run (about 2 min 15 s in all)' },
    duration: { type: 'string', help: 'seconds of load (more than 20; default 1800, or 90 with --quick)' },
    seed: { type: 'string', default: '1', help: 'seed of the fault schedule (an integer)' },
    rate: { type: 'string', default: '12', help: 'rooms started per second' },
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
const WORKER = fileURLToPath(new URL('./chaos/worker.mjs', import.meta.url));
const MODEL = { layers: 4, heads: 4, headBytes: 64, pageSize: 16, pages: 384, auxSlots: 64, auxItem: 64, ecSlots: 4, ecItem: 64 << 10 };
// Short enough that a fault's rooms end within seconds, long enough for a loaded 2-core host.
const TIMEOUTS = { bootstrapMs: 8_000, waitingMs: 10_000, heartbeatMs: 500, heartbeatMaxFailures: 2, abortMs: 6_000, transferMs: 3_000 };
// The most a room may take to end on a rank (every timeout it can run into, plus slack).
const ROOM_END_MS = TIMEOUTS.bootstrapMs + TIMEOUTS.waitingMs + TIMEOUTS.abortMs + 10_000;
// Pages a failed write may still land in are handed out again only after this long.
const QUARANTINE_MS = 30_000;
const WARMUP_MS = Math.min(15_000, DURATION_S * 150);
const MAX_IN_FLIGHT = 48;
const rand = prng(SEED);
const log = (...a) => (opt.verbose ? console.error(`[${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...a) : undefined);
const t0 = Date.now();
/** When the load started (every process up). */
let tRun = t0;

// ---------------------------------------------------------------------------- processes
class Proc {
  constructor(name, spec, ns) {
    this.name = name;
    this.spec = spec;
    this.ns = ns;
    this.state = 'down';
    this.restarts = 0;
    this.lastSuccessAt = 0;
    this.restartedAt = 0;
    this.baseline = undefined;
  }

  async start() {
    this.state = 'starting';
    const execArgv = this.ns ? ['netns', 'exec', this.ns.name, process.execPath] : [];
    const child = fork(WORKER, [], {
      env: { ...process.env, TE_CHAOS_SPEC: JSON.stringify(this.spec), ...(opt.checksums ? { TE_KV_CHECKSUMS: '1' } : {}) },
      execArgv,
      ...(this.ns ? { execPath: 'ip' } : {}),
      stdio: ['ignore', 'ignore', opt.verbose ? 'inherit' : 'ignore', 'ipc'],
    });
    this.child = child;
    this.pending = new Map();
    this.next = 1;
    child.on('message', (m) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.value);
      else p.reject(new Error(m.error));
    });
    child.on('error', () => undefined);
    child.on('exit', () => {
      if (this.child === child) this.state = 'down';
      for (const p of this.pending.values()) p.reject(new Error(`${this.name} exited`));
      this.pending.clear();
    });
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`${this.name} did not start within 60 s`)), 60_000);
      let why = '';
      const onReady = (m) => {
        if (m.event === 'startFailed') why = `: ${m.message}`;
        if (m.event !== 'ready') return;
        clearTimeout(t);
        child.off('message', onReady);
        resolve();
      };
      child.on('message', onReady);
      child.once('exit', (code, signal) => {
        clearTimeout(t);
        reject(new Error(`${this.name} exited while starting (${signal ?? code})${why}`));
      });
    });
    this.state = 'up';
  }

  call(op, args = {}, timeoutMs = ROOM_END_MS + 30_000) {
    if (this.state !== 'up' && this.state !== 'stopped') return Promise.reject(new Error(`${this.name} is ${this.state}`));
    const child = this.child;
    return new Promise((resolve, reject) => {
      const id = this.next++;
      const t = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${this.name}: ${op} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve: (v) => (clearTimeout(t), resolve(v)), reject: (e) => (clearTimeout(t), reject(e)) });
      child.send({ id, op, args }, (e) => e && undefined);
    });
  }

  signal(sig) {
    try {
      process.kill(this.child.pid, sig);
    } catch {
      // already gone
    }
  }

  async kill() {
    const gone = new Promise((r) => (this.child.exitCode !== null || this.child.signalCode !== null ? r() : this.child.once('exit', r)));
    this.state = 'down';
    this.signal('SIGCONT');
    this.signal('SIGKILL');
    await gone;
  }

  async close() {
    if (this.state === 'down') return;
    this.signal('SIGCONT');
    const gone = new Promise((r) => this.child.once('exit', r));
    this.call('close', {}, 20_000).catch(() => undefined);
    const t = setTimeout(() => this.signal('SIGKILL'), 20_000);
    await gone;
    clearTimeout(t);
  }
}

// ---------------------------------------------------------------------------- topology
const useNetns = !opt['no-netns'] && netnsSupport() === true;
const ns = useNetns ? new Namespace(`techaos${process.pid % 10000}`) : undefined;
const HOST = ns ? ns.hostIp : '127.0.0.1';
const bootstraps = [];
const prefills = []; // [instance][tp]
const decodes = []; // [instance][dp][tp]

async function build() {
  if (ns) ns.create();
  for (let i = 0; i < 2; i++) {
    const port = await freePort();
    bootstraps.push(new Proc(`bootstrap${i}`, { role: 'bootstrap', host: HOST, port }));
  }
  for (let i = 0; i < 2; i++) {
    prefills.push([]);
    for (let tp = 0; tp < 2; tp++) {
      const layout = { attnTpSize: 2, attnTpRank: tp, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
      const spec = {
        role: 'prefill',
        host: HOST,
        controlPort: await freePort(),
        layout,
        model: MODEL,
        timeouts: TIMEOUTS,
        bootstrap: { host: HOST, port: bootstraps[i].spec.port },
        ...(i === 0 && tp === 0 ? { ec: 'producer' } : {}),
      };
      prefills[i].push(new Proc(`prefill${i}.tp${tp}`, spec));
    }
  }
  for (let i = 0; i < 2; i++) {
    decodes.push([]);
    // Decode instance 1 lives behind the namespace's link (slowed by the tbf fault).
    const inNs = ns && i === 1;
    for (let dp = 0; dp < 2; dp++) {
      decodes[i].push([]);
      for (let tp = 0; tp < 2; tp++) {
        const layout = { attnTpSize: 2, attnTpRank: tp, attnDpSize: 2, attnDpRank: dp, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
        const spec = {
          role: 'decode',
          host: inNs ? ns.peerIp : HOST,
          controlPort: await freePort(),
          layout,
          model: MODEL,
          timeouts: TIMEOUTS,
          bootstrap: { host: HOST, port: 0 },
          ...(i === 0 && dp === 0 && tp === 0 ? { ec: 'consumer' } : {}),
        };
        decodes[i][dp].push(new Proc(`decode${i}.dp${dp}.tp${tp}`, spec, inNs ? ns : undefined));
      }
    }
  }
  await Promise.all(bootstraps.map((b) => b.start()));
  await Promise.all(prefills.flat().map((p) => p.start()));
  await Promise.all(decodes.flat(2).map((d) => d.start()));
}

const allProcs = () => [...bootstraps, ...prefills.flat(), ...decodes.flat(2)];

// ---------------------------------------------------------------------------- page pools
class Pool {
  constructor(n) {
    this.free = Array.from({ length: n }, (_, i) => i);
    this.quarantined = 0;
  }
  take(n) {
    if (this.free.length < n) return undefined;
    return this.free.splice(0, n);
  }
  give(pages) {
    this.free.push(...pages);
  }
}
const prefillPages = [new Pool(MODEL.pages), new Pool(MODEL.pages)];
const decodePages = [
  [new Pool(MODEL.pages), new Pool(MODEL.pages)],
  [new Pool(MODEL.pages), new Pool(MODEL.pages)],
];
const prefillAux = [new Pool(MODEL.auxSlots), new Pool(MODEL.auxSlots)];
const decodeAux = [
  [new Pool(MODEL.auxSlots), new Pool(MODEL.auxSlots)],
  [new Pool(MODEL.auxSlots), new Pool(MODEL.auxSlots)],
];

// ---------------------------------------------------------------------------- report state
const report = {
  seed: SEED,
  durationS: 0,
  roomsStarted: 0,
  roomsCompleted: 0,
  roomsFailed: 0,
  failedByCause: {},
  rankOutcomesLostToKills: 0,
  successUndelivered: 0,
  abortedAfterPrefillSuccess: 0,
  faultsInjected: 0,
  faultsByKind: {},
  abortsInjected: { decode: 0, prefill: 0 },
  layerwiseRooms: 0,
  chunkedRooms: 0,
  ec: { items: 0, loaded: 0, failed: 0, failedByCause: {}, wrongBytes: 0 },
  latencyMs: { p50: 0, p99: 0, max: 0 },
  wrongBytes: 0,
  invariantViolations: 0,
  violations: [],
  quarantinedPages: 0,
  restartsRetriedForPort: 0,
  processesMeasured: 0,
  nonSocketFdGrowth: 0,
  rssGrowthMiB: 0,
  fdGrowth: 0,
  tablesAfterLoad: {},
  netns: useNetns,
  checksums: opt.checksums,
};
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
  const upAll = (ranks) => ranks.every((r) => r.state === 'up' || r.state === 'stopped');
  const pChoices = [0, 1].filter((i) => upAll(prefills[i]) && bootstraps[i].state === 'up');
  const dChoices = [];
  for (let i = 0; i < 2; i++) for (let g = 0; g < 2; g++) if (upAll(decodes[i][g])) dChoices.push([i, g]);
  if (pChoices.length === 0 || dChoices.length === 0) return;
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
  const room = rand.u63();
  const src = prefillPages[P].take(n);
  const dst = decodePages[D][G].take(n);
  const auxSrc = prefillAux[P].take(1);
  const auxDst = decodeAux[D][G].take(1);
  if (!src || !dst || !auxSrc || !auxDst) {
    if (src) prefillPages[P].give(src);
    if (dst) decodePages[D][G].give(dst);
    if (auxSrc) prefillAux[P].give(auxSrc);
    if (auxDst) decodeAux[D][G].give(auxDst);
    return;
  }
  if (abortSide) {
    report.abortsInjected[abortSide]++;
    report.faultsInjected++;
    bump(report.faultsByKind, `abort-${abortSide}`);
  }
  if (mode === 'layerwise') report.layerwiseRooms++;
  if (mode === 'chunked') report.chunkedRooms++;
  report.roomsStarted++;
  inFlight++;
  const key = room.toString();
  const bootstrapPort = bootstraps[P].spec.port;
  const pRanks = prefills[P];
  const dRanks = decodes[D][G];
  const sendArgs = { room: key, pages: src, auxSlot: auxSrc[0], mode, chunks, endMs: ROOM_END_MS, ...(abortSide === 'prefill' ? { abortAfterMs } : {}) };
  const recvArgs = {
    room: key,
    pages: dst,
    auxSlot: auxDst[0],
    sendsAux: true,
    endMs: ROOM_END_MS,
    bootstrapPort,
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
  const ps = alive(pRanks, pOut, pLives);
  const ds = alive(dRanks, dOut, dLives);
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
  // The prefill's source pages: every write of the room settled (the worker waited for it).
  prefillPages[P].give(src);
  prefillAux[P].give(auxSrc);
  // The decode's pages: a failed room's must not change after it failed (checked a moment
  // later); pages a write may still land in are never handed out again.
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
      violation(`room ${key}: pages on ${dRanks[i].name} changed after Failed (${d.code}) without pagesMayBeWritten`);
  }
  if (reuse) {
    decodePages[D][G].give(dst);
    decodeAux[D][G].give(auxDst);
  } else {
    // Held back well past every deadline (a write that lands later still is caught as wrong
    // bytes of the room that gets these pages next).
    report.quarantinedPages += dst.length;
    setTimeout(() => {
      decodePages[D][G].give(dst);
      decodeAux[D][G].give(auxDst);
    }, QUARANTINE_MS).unref();
  }
  inFlight--;
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
    // A restarted process gets its own baseline once it has served a while.
    if (baselined && now >= nextBaselineAt) {
      nextBaselineAt = now + 5_000;
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
    if (now >= nextRoomAt) {
      nextRoomAt += tick;
      if (inFlight < MAX_IN_FLIGHT) rooms.push(startRoom().catch((e) => violation(`driver: ${e.stack}`)));
    }
    if (now >= nextEcAt) {
      nextEcAt = now + 1_500;
      faults.push(ecRound().catch((e) => violation(`driver (EC): ${e.stack}`)));
    }
    if (now >= nextFaultAt && now < faultsEnd) {
      const [kind, , run] = pickFault();
      report.faultsInjected++;
      bump(report.faultsByKind, kind);
      log('fault', kind);
      faults.push(run().catch((e) => violation(`fault ${kind}: ${e.message}`)));
      nextFaultAt = now + rand.int(3_000, 7_000);
    }
    await sleep(Math.max(1, Math.min(nextRoomAt, nextEcAt) - Date.now()));
  }
  log('load stopped; draining', inFlight, 'rooms');
  await Promise.all(faults);
  await Promise.all(rooms);
  // Tables drain on their own: marks of aborted rooms are swept after bootstrapMs.
  await sleep(2 * TIMEOUTS.bootstrapMs + 2_000);
  const end = await sampleAll();
  const loadEndAt = Date.now();
  report.durationS = Math.round((loadEndAt - t0) / 1000);
  report.loadS = DURATION_S;
  let rss = 0;
  let fd = 0;
  let otherFd = 0;
  for (const p of allProcs()) {
    const s = end.get(p);
    if (!s) {
      violation(`${p.name} did not answer after the load (${p.state})`);
      continue;
    }
    if (s.tables.movedAfterEnd) violation(`${p.name}: ${s.tables.movedAfterEnd} room statuses moved after they ended`);
    for (const t of ['live', 'senders', 'pending', 'aborted', 'receivers'])
      if (s.tables[t]) violation(`${p.name}: table ${t} holds ${s.tables[t]} entries after the load`);
    report.tablesAfterLoad[p.name] = s.tables;
    // Growth against a baseline of the same life (taken after the warm-up, or a while after
    // the process's last restart). Sockets follow which peers are up (they restart too):
    // for a process that ever restarted only its other descriptors are held to the baseline.
    if (p.baseline) {
      report.processesMeasured++;
      const grow = (s.rss - p.baseline.rss) / 2 ** 20;
      rss = Math.max(rss, grow);
      const other = s.fds - s.socketFds - (p.baseline.fds - p.baseline.socketFds);
      otherFd = Math.max(otherFd, other);
      if (grow > Math.max(48, (0.25 * p.baseline.rss) / 2 ** 20)) violation(`${p.name}: RSS grew ${grow.toFixed(1)} MiB over the run`);
      if (other > 2) violation(`${p.name}: ${other} more open descriptors (not sockets) than at its baseline`);
      if (!p.restartedAt) {
        fd = Math.max(fd, s.fds - p.baseline.fds);
        if (s.fds - p.baseline.fds > 4) violation(`${p.name}: ${s.fds - p.baseline.fds} more open descriptors than at the baseline`);
      }
    }
    // A restarted rank or server serves again (when it came back early enough to be routed rooms).
    if (p.restartedAt && p.restartedAt < loadEnd - 15_000 && p.lastSuccessAt < p.restartedAt)
      violation(`${p.name} restarted at ${((p.restartedAt - tRun) / 1000).toFixed(0)} s of load and served no room after`);
  }
  report.rssGrowthMiB = Number(rss.toFixed(1));
  report.fdGrowth = fd;
  report.nonSocketFdGrowth = otherFd;
  latencies.sort((a, b) => a - b);
  const q = (x) => latencies[Math.min(latencies.length - 1, Math.floor(x * latencies.length))] ?? 0;
  report.latencyMs = { p50: q(0.5), p99: q(0.99), max: latencies.at(-1) ?? 0 };
  if (report.roomsCompleted === 0) violation('no room completed');
  await Promise.all(allProcs().map((p) => p.close()));
}

function print() {
  const r = report;
  console.log(`chaos soak, seed ${r.seed}: ${r.loadS} s of load, ${r.durationS} s in all${r.netns ? '' : ' (no network namespace: no slowed link)'}`);
  console.log(
    `rooms: ${r.roomsStarted} started, ${r.roomsCompleted} completed, ${r.roomsFailed} failed ${JSON.stringify(r.failedByCause)}; ${r.layerwiseRooms} layerwise, ${r.chunkedRooms} chunked`,
  );
  console.log(`room latency (decode, Success): p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms, max ${r.latencyMs.max} ms`);
  console.log(
    `faults: ${r.faultsInjected} ${JSON.stringify(r.faultsByKind)}; rank outcomes lost to kills: ${r.rankOutcomesLostToKills}; decode Success the prefill could not deliver (documented): ${r.successUndelivered}; decode aborts after the prefill's Success: ${r.abortedAfterPrefillSuccess}`,
  );
  console.log(`EC: ${r.ec.items} items, ${r.ec.loaded} loaded, ${r.ec.failed} failed ${JSON.stringify(r.ec.failedByCause)}`);
  if (r.restartsRetriedForPort) console.log(`restarts retried because the control port was still taken: ${r.restartsRetriedForPort}`);
  console.log(
    `wrong bytes: ${r.wrongBytes}; quarantined pages (pagesMayBeWritten): ${r.quarantinedPages}; RSS growth (max per process, ${r.processesMeasured} processes measured): ${r.rssGrowthMiB} MiB; descriptor growth: ${r.fdGrowth} (never-restarted processes), ${r.nonSocketFdGrowth} not sockets (all measured)`,
  );
  console.log(`invariant violations: ${r.invariantViolations}`);
  for (const v of r.violations) console.log(`  - ${v}`);
  console.log(r.invariantViolations === 0 ? 'PASS' : 'FAIL');
  if (opt.json) console.log(JSON.stringify(r));
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
print();
process.exitCode = report.invariantViolations === 0 ? 0 : 1;
