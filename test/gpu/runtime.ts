/**
 * The runtime on GPU memory: PD between processes with the KV in CUDA memory (cuda:0) and
 * aux in host memory, every byte read back to the host and compared. Started by
 * test/gpu/run.sh after the transport harness (node --import tsx, from the runtime
 * test/gpu/prepare.sh packs), or by hand:
 *   node --import tsx test/gpu/runtime.ts        (TE_GPU_RUNTIME_CONNECTORS=a,b narrows it)
 * Cases: TP 1→1 over each connector (mooncake-intra-nvlink, mooncake-tcp's CUDA staging,
 * mooncake-nvlink's VMM path), TP 2→4 head slicing over mooncake-intra-nvlink (the per-token
 * path: staging copies host memory only), layerwise with the CUDA event helper, a decode
 * killed mid-room and restarted (the prefill reopens the new decode's IPC handles), an abort
 * mid-transfer, and the EC producer's device pool. Figures: PD throughput as a fraction of
 * the same transport's raw throughput for the same page ranges (engine.transfer, same
 * processes, same run), and the share of the layerwise tail hidden.
 * Results: $OUT/runtime-results.json. Exit: 0 passed, 1 a check failed, 2 no usable GPU.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { KVStatus, createTransferEngine, isTransferError } from '@te/connector';
import { createECProducer } from '@te/disagg';
import { addonLoader, probeCuda, type NativeCudaModule } from '@te/cuda';
import { compileWorkerScript, freePort } from '@te/testkit';
import type { Model, RankOps, RankSpec, RoomArgs } from './runtime-rank.js';

const root = join(import.meta.dirname, '..', '..');
const OUT = process.env.OUT ?? join(root, 'test', 'gpu', 'build', 'out');
/**
 * TE_GPU_RUNTIME_HOST=1: a host rehearsal of the whole suite (KV in host memory over
 * mooncake-tcp, no event helper) that checks the suite's own logic where there is no GPU;
 * it says nothing of the GPU path. The CI runs it (test/gpu-runtime-suite.test.ts).
 */
const HOST = process.env.TE_GPU_RUNTIME_HOST === '1';
/** The connector of the cases that run once (TP 2→4, layerwise, restart, abort). */
const MAIN: RankSpec['connector'] = HOST ? 'mooncake-tcp' : 'mooncake-intra-nvlink';
const CONNECTORS = (
  HOST ? ['mooncake-tcp'] : (process.env.TE_GPU_RUNTIME_CONNECTORS ?? 'mooncake-intra-nvlink,mooncake-tcp,mooncake-nvlink').split(',')
) as RankSpec['connector'][];
/**
 * 8 layers (K and V: 16 buffers), 8 heads of 256 bytes, 16 tokens a page: 512 KiB per page
 * over all buffers. The host rehearsal holds fewer pages (its checks are the same).
 */
const MODEL: Model = { layers: 8, heads: 8, headBytes: 256, pageSize: 16, pages: HOST ? 160 : 512, auxSlots: 64, auxBytes: 64 };
/** Pages of the throughput room: 256 pages × 512 KiB = 128 MiB (host rehearsal: 32 pages). */
const BENCH_PAGES = HOST ? 32 : 256;
const CALL_MS = 120_000;
/** TE_GPU_RUNTIME_CASES=a,b: only these cases (pd, pd-2-4, layerwise, restart, abort, ec); default all. */
const CASES = new Set((process.env.TE_GPU_RUNTIME_CASES ?? 'pd,pd-2-4,layerwise,restart,abort,ec').split(','));
/** Copy benchmark sizes: 4 KiB … 64 MiB (host rehearsal: up to 1 MiB). */
const COPY_SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20].filter((x) => x <= (HOST ? 1 << 20 : 64 << 20));
const SCRATCH = Math.max(...COPY_SIZES);

interface Results {
  device: unknown;
  checks: { name: string; ok: boolean; detail?: string }[];
  figures: Record<string, unknown>;
  /** What the runtime cannot do yet on device memory (not failures of this run). */
  gaps: string[];
  failures: string[];
}
const results: Results = { device: null, checks: [], figures: {}, gaps: [], failures: [] };
const log = (...a: unknown[]) => console.log('[runtime]', ...a);

function check(name: string, ok: boolean, detail?: string): boolean {
  results.checks.push({ name, ok, ...(detail ? { detail } : {}) });
  log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? `: ${detail}` : ''}`);
  if (!ok) results.failures.push(`${name}${detail ? `: ${detail}` : ''}`);
  return ok;
}

function save(): void {
  mkdirSync(OUT, { recursive: true });
  writeFileSync(
    join(OUT, 'runtime-results.json'),
    JSON.stringify(results, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2),
  );
}

/** The value a rank's op (runtime-rank.ts) replies with. */
type Reply<K extends keyof RankOps> = Awaited<ReturnType<RankOps[K]>>;

/** The events a rank sends, by name. */
interface RankEvents {
  ready: { event: 'ready'; segment: string };
  startFailed: { event: 'startFailed'; code: string; message: string };
  chunk: { event: 'chunk'; room: string };
  requested: { event: 'requested'; room: string };
}

/** A message from a rank: a call's reply (by `id`: `value` or `error`) or an event (by `event` name). */
interface RankMessage {
  id?: number;
  ok?: boolean;
  value?: unknown;
  error?: string;
  event?: string;
}

interface Rank {
  child: ChildProcess;
  segment: string;
  call<K extends keyof RankOps>(op: K, args?: unknown, timeoutMs?: number): Promise<Reply<K>>;
  event<K extends keyof RankEvents>(name: K, timeoutMs?: number): Promise<RankEvents[K]>;
}

/**
 * The rank script, bundled to plain JavaScript where esbuild is installed (a rank then
 * starts without a TypeScript loader, about 1.5 s of CPU less per rank), else run by tsx.
 */
const rankScript: Promise<{ script: string; execArgv: string[] }> = (async () => {
  const source = join(import.meta.dirname, 'runtime-rank.ts');
  try {
    return { script: await compileWorkerScript(source), execArgv: [] };
  } catch {
    return { script: source, execArgv: ['--import', 'tsx'] };
  }
})();

/** Starts one rank process and waits until its manager is up (or says why not). */
async function spawnRank(spec: RankSpec): Promise<Rank> {
  const worker = await rankScript;
  const child = fork(worker.script, [], {
    execArgv: worker.execArgv,
    env: { ...process.env, TE_GPU_RANK_SPEC: JSON.stringify(spec) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let next = 1;
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  const listeners: { name: string; resolve(v: unknown): void }[] = [];
  child.on('message', (msg: RankMessage) => {
    if (msg.id !== undefined) {
      const p = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.ok) p?.resolve(msg.value);
      else p?.reject(new Error(msg.error));
    } else if (msg.event) {
      const waiting = listeners.splice(0);
      for (const l of waiting) {
        if (l.name === msg.event) l.resolve(msg);
        else listeners.push(l);
      }
    }
  });
  child.on('exit', (code, signal) => {
    for (const p of pending.values()) p.reject(new Error(`rank exited (${code ?? signal})`));
    pending.clear();
  });
  const event = <K extends keyof RankEvents>(name: K, timeoutMs = CALL_MS) =>
    new Promise<RankEvents[K]>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no "${name}" event within ${timeoutMs} ms`)), timeoutMs);
      listeners.push({ name, resolve: (v) => (clearTimeout(t), resolve(v as RankEvents[K])) });
    });
  const call = <T>(op: string, args?: unknown, timeoutMs = CALL_MS) =>
    new Promise<T>((resolve, reject) => {
      const id = next++;
      const t = setTimeout(() => (pending.delete(id), reject(new Error(`${op}: no answer within ${timeoutMs} ms`))), timeoutMs);
      pending.set(id, { resolve: (v) => (clearTimeout(t), resolve(v as T)), reject: (e) => (clearTimeout(t), reject(e)) });
      child.send({ id, op, args });
    });
  return new Promise((resolve, reject) => {
    const failed = event('startFailed');
    const ready = event('ready');
    ready.then(
      (m) => resolve({ child, segment: m.segment, call, event }),
      () => undefined,
    );
    failed.then(
      (m) => (child.kill('SIGKILL'), reject(new Error(`${spec.role} rank ${spec.tpRank} did not start: ${m.code}: ${m.message}`))),
      () => undefined,
    );
    child.once('exit', (code) => reject(new Error(`${spec.role} rank ${spec.tpRank} exited (${code}) before it was ready`)));
  });
}

async function closeAll(ranks: Rank[]): Promise<void> {
  await Promise.all(
    ranks.map(async (r) => {
      if (r.child.exitCode !== null || r.child.signalCode !== null) return;
      await r.call('close', undefined, 30_000).catch(() => r.child.kill('SIGKILL'));
    }),
  );
}

/** A room: pages [first, first+n) on the prefill, the same count elsewhere on the decode (shifted: a page map). */
function rooms(room: number, first: number, n: number, auxSlot: number): { prefill: RoomArgs; decode: RoomArgs } {
  const pages = Array.from({ length: n }, (_, i) => first + i);
  return {
    prefill: { room: String(room), pages, auxSlot },
    decode: { room: String(room), pages: pages.map((p) => (p + MODEL.pages / 2) % MODEL.pages), auxSlot: (auxSlot + 1) % MODEL.auxSlots },
  };
}

async function startPD(connector: RankSpec['connector'], tpP: number, tpD: number, layerwise = false) {
  const port = await freePort();
  const base = { connector, bootstrapPort: port, layerwise, model: MODEL, host: HOST, scratchBytes: SCRATCH };
  // Prefill rank 0 serves the bootstrap: start the prefills first.
  const prefills = await Promise.all(Array.from({ length: tpP }, (_, r) => spawnRank({ ...base, role: 'prefill', tp: tpP, tpRank: r })));
  const decodes = await Promise.all(Array.from({ length: tpD }, (_, r) => spawnRank({ ...base, role: 'decode', tp: tpD, tpRank: r })));
  return { port, prefills, decodes, spec: base };
}

/** One room through every rank: returns the prefill send results and the decode receive results. */
async function moveRoom(pd: { prefills: Rank[]; decodes: Rank[] }, r: { prefill: RoomArgs; decode: RoomArgs }, verify = true) {
  // The decodes compare their memory only once every side is done: a comparison is seconds
  // of JS on the decode's thread, which would delay the messages that end the prefill's room
  // (and its timing).
  const recv = pd.decodes.map((d) => d.call('receive', { ...r.decode, verify: false }));
  const sent = await Promise.all(pd.prefills.map((p) => p.call('send', r.prefill)));
  const received = await Promise.all(recv);
  if (verify) {
    const checked = await Promise.all(pd.decodes.map((d) => d.call('verify')));
    received.forEach((x, i) => (x.mismatch = checked[i].mismatch));
  }
  return { sent, received };
}

function roomOk(name: string, x: { sent: Reply<'send'>[]; received: Reply<'receive'>[] }): boolean {
  const bad = [
    ...x.sent.map((s, i) => (s.status === KVStatus.Success ? undefined : `prefill ${i}: ${s.status} ${s.code ?? ''} ${s.message ?? ''}`)),
    ...x.received.map((d, i) =>
      d.status !== KVStatus.Success ? `decode ${i}: ${d.status} ${d.code ?? ''} ${d.message ?? ''}` : d.mismatch ? `decode ${i}: ${d.mismatch}` : undefined,
    ),
  ].filter(Boolean);
  return check(name, bad.length === 0, bad.join('; ') || undefined);
}

async function pdCase(connector: RankSpec['connector'], tpP: number, tpD: number): Promise<void> {
  const name = `PD ${connector} TP ${tpP}→${tpD}`;
  let pd: Awaited<ReturnType<typeof startPD>> | undefined;
  try {
    pd = await startPD(connector, tpP, tpD);
    for (let k = 0; k < 3; k++) {
      const x = await moveRoom(pd, rooms(100 + k, k * 16, 16, k));
      roomOk(`${name}: room ${k + 1} (16 pages), every byte compared on the host`, x);
      log(
        `${name}: room ${k + 1}: handshake ${x.sent.map((s) => s.handshakeMs?.toFixed(1)).join('/')} ms, transfer ${x.sent.map((s) => s.transferMs?.toFixed(1)).join('/')} ms`,
      );
    }
    if (tpP === 1 && tpD === 1) {
      // Throughput: a 128 MiB room, PD against engine.transfer of the same page ranges.
      const r = rooms(200, 0, BENCH_PAGES, 10);
      const x = await moveRoom(pd, r);
      roomOk(`${name}: ${BENCH_PAGES}-page room (${(BENCH_PAGES * 512) >> 10} MiB), every byte compared`, x);
      // The timed room: the second of its size (the first warmed both sides).
      const again = await moveRoom(pd, rooms(201, 0, BENCH_PAGES, 11));
      roomOk(`${name}: second ${BENCH_PAGES}-page room`, again);
      const info = await pd.decodes[0]!.call('info');
      const raw = await pd.prefills[0]!.call('raw', {
        ...rooms(201, 0, BENCH_PAGES, 11).prefill,
        remotePages: rooms(201, 0, BENCH_PAGES, 11).decode.pages,
        segment: info.segment,
        remoteKvBase: info.kvBase,
        iterations: 3,
      });
      const bytes = BENCH_PAGES * info.bytesPerPage;
      const pdGBs = bytes / (again.sent[0].transferMs! / 1e3) / 1e9;
      const rawGBs = raw.bytes / (raw.ms / 1e3) / 1e9;
      results.figures[`pd ${connector}`] = {
        bytes,
        pdTransferMs: again.sent[0].transferMs,
        handshakeMs: again.sent[0].handshakeMs,
        pdGBs,
        rawMs: raw.ms,
        rawGBs,
        ratio: pdGBs / rawGBs,
        note: 'PD: the sender waiting for input (destination known) → Success; raw: one engine.transfer of the same descriptors, peer already open, mean of 3',
      };
      log(`${name}: PD ${pdGBs.toFixed(2)} GB/s, raw ${rawGBs.toFixed(2)} GB/s, ratio ${(pdGBs / rawGBs).toFixed(3)}`);
      const v = await pd.decodes[0]!.call('verify');
      check(`${name}: decode memory after the bench`, v.mismatch === null, v.mismatch ?? undefined);
      // The verifier itself: one flipped byte of device memory must be found, and named.
      const page = r.decode.pages[7]!;
      await pd.decodes[0]!.call('corrupt', { buffer: 3, page, offset: 1000 });
      const bad = await pd.decodes[0]!.call('verify');
      check(
        `${name}: the host comparison finds one flipped byte`,
        typeof bad.mismatch === 'string' && bad.mismatch.startsWith(`KV buffer 3 page ${page} `) && bad.mismatch.includes('byte 1000 '),
        bad.mismatch ?? 'not found',
      );
      await pd.decodes[0]!.call('corrupt', { buffer: 3, page, offset: 1000 });
      const restored = await pd.decodes[0]!.call('verify');
      check(`${name}: the flipped byte restored`, restored.mismatch === null, restored.mismatch ?? undefined);
      await copyBench(connector, pd.prefills[0]!, pd.decodes[0]!, info);
    }
  } catch (e) {
    check(name, false, (e as Error).message);
  } finally {
    if (pd) await closeAll([...pd.prefills, ...pd.decodes]);
  }
}

/**
 * The connector's copy throughput between the two processes against cudaMemcpy of the same
 * size in the same run: device → device (baseline: cudaMemcpyAsync in one process, CUDA
 * events) and host → device (baseline: a synchronous cudaMemcpy from the same host memory).
 * The decode's scratch is compared (SHA-256) with the bytes sent after every timed loop, and
 * zeroed before the next.
 */
async function copyBench(connector: string, prefill: Rank, decode: Rank, info: { segment: string; scratch: string }): Promise<void> {
  const rows: Record<string, unknown>[] = [];
  for (const kind of ['d2d', 'h2d'] as const) {
    for (const size of COPY_SIZES) {
      const iterations = size >= 16 << 20 ? 10 : 50;
      const c = await prefill.call('copy', { kind, size, iterations, segment: info.segment, remoteScratch: info.scratch });
      const landed = await decode.call('scratch', { length: size, clear: true });
      check(`copy ${connector} ${kind} ${size} B: the bytes landed (SHA-256)`, landed.digest === c.digest);
      const gbs = size / (c.ms / 1e3) / 1e9;
      const baseGBs = size / (c.baselineMs / 1e3) / 1e9;
      rows.push({ kind, size, ms: c.ms, GBs: gbs, baselineMs: c.baselineMs, baselineGBs: baseGBs, ratio: gbs / baseGBs });
      log(`copy ${connector} ${kind} ${size} B: ${gbs.toFixed(2)} GB/s vs cudaMemcpy ${baseGBs.toFixed(2)} GB/s (${(gbs / baseGBs).toFixed(3)})`);
    }
  }
  results.figures[`copy ${connector}`] = {
    rows,
    note: 'one write in flight, wall clock per engine.transfer; d2d baseline cudaMemcpyAsync device→device in one process (CUDA events), h2d baseline synchronous cudaMemcpy from the same host memory',
  };
}

async function layerwiseCase(): Promise<void> {
  const name = `layerwise ${MAIN} TP 1→1 with the CUDA event helper${HOST ? ' (host rehearsal: no event)' : ''}`;
  let pd: Awaited<ReturnType<typeof startPD>> | undefined;
  try {
    pd = await startPD(MAIN, 1, 1, true);
    const layerMs = 20;
    const list = [0, 1, 2, 3].map((k) => rooms(300 + k, k * 32, 32, 20 + k));
    // Rooms land concurrently: the decode's memory is compared once all have.
    const recv = list.map((r) => pd!.decodes[0]!.call('receive', { ...r.decode, verify: false }));
    const b = await pd.prefills[0]!.call('batch', { rooms: list.map((r) => r.prefill), layerMs });
    const got = await Promise.all(recv);
    const after = await pd.decodes[0]!.call('verify');
    const bad = [
      ...b.results.filter((r) => r.status !== KVStatus.Success).map((r) => `prefill room ${r.room}: ${r.status} ${r.code} ${r.message}`),
      ...got.filter((g) => g.status !== KVStatus.Success).map((g) => `decode: ${g.status} ${g.code ?? ''} ${g.message ?? ''}`),
      ...(after.mismatch ? [`decode memory: ${after.mismatch}`] : []),
    ];
    check(`${name}: 4 rooms × 32 pages, every byte compared on the host`, bad.length === 0, bad.join('; ') || undefined);
    // The same bytes sent whole after compute: the tail layerwise should hide.
    const whole = await Promise.all(
      [0, 1, 2, 3].map(async (k) => {
        const r = rooms(400 + k, k * 32, 32, 30 + k);
        return moveRoom(pd!, r, false);
      }),
    );
    whole.forEach((w, k) => roomOk(`${name}: whole room ${k + 1} after the batch`, w));
    const v = await pd.decodes[0]!.call('verify');
    check(`${name}: decode memory after the whole rooms, every byte compared on the host`, v.mismatch === null, v.mismatch ?? undefined);
    // A whole room starts after compute; its handshake, as the layerwise rooms', is done before.
    const wholeMs = Math.max(...whole.map((w) => w.sent[0].transferMs!));
    const hidden = 1 - b.tailMs / wholeMs;
    results.figures.layerwise = { layers: MODEL.layers, layerMs, tailMs: b.tailMs, wholeMs, hiddenShare: hidden, stats: b.stats };
    log(`${name}: tail ${b.tailMs.toFixed(1)} ms after the last layer vs ${wholeMs.toFixed(1)} ms whole: ${(hidden * 100).toFixed(0)}% hidden`);
  } catch (e) {
    check(name, false, (e as Error).message);
  } finally {
    if (pd) await closeAll([...pd.prefills, ...pd.decodes]);
  }
}

async function restartCase(): Promise<void> {
  const name = `decode killed mid-room and restarted (${MAIN})`;
  let pd: Awaited<ReturnType<typeof startPD>> | undefined;
  try {
    pd = await startPD(MAIN, 1, 1);
    roomOk(`${name}: room before the kill`, await moveRoom(pd, rooms(500, 0, 16, 0)));
    const r = rooms(501, 16, 64, 1);
    void pd.decodes[0]!.call('receive', r.decode).catch(() => undefined);
    const sending = pd.prefills[0]!.call('send', { ...r.prefill, chunks: 4, pauseMs: 1500 });
    await pd.prefills[0]!.event('chunk');
    pd.decodes[0]!.child.kill('SIGKILL');
    const started = Date.now();
    const s = await sending;
    check(
      `${name}: the room in flight fails with a code (not Success, not a hang)`,
      s.status !== KVStatus.Success && typeof s.code === 'string',
      `${s.status} ${s.code}: ${s.message} after ${Date.now() - started} ms`,
    );
    pd.decodes[0] = await spawnRank({ ...pd.spec, role: 'decode', tp: 1, tpRank: 0 });
    for (let k = 0; k < 2; k++)
      roomOk(`${name}: room ${k + 1} to the restarted decode (its IPC handles opened anew)`, await moveRoom(pd, rooms(510 + k, 100 + k * 16, 16, 5 + k)));
  } catch (e) {
    check(name, false, (e as Error).message);
  } finally {
    if (pd) await closeAll([...pd.prefills, ...pd.decodes]);
  }
}

async function abortCase(): Promise<void> {
  const name = `abort mid-transfer (${MAIN})`;
  let pd: Awaited<ReturnType<typeof startPD>> | undefined;
  try {
    pd = await startPD(MAIN, 1, 1);
    const r = rooms(600, 0, 64, 0);
    const receiving = pd.decodes[0]!.call('receive', r.decode);
    const sending = pd.prefills[0]!.call('send', { ...r.prefill, chunks: 4, pauseMs: 1000 });
    await pd.prefills[0]!.event('chunk');
    const ab = await pd.decodes[0]!.call('abort', { room: r.decode.room, reason: 'aborted by the GPU suite' });
    const [s, d] = await Promise.all([sending, receiving]);
    check(`${name}: the decode's abort is accepted`, ab.ok === true, ab.message);
    check(
      `${name}: both sides end failed`,
      s.status === KVStatus.Failed && d.status === KVStatus.Failed,
      `prefill ${s.status} ${s.code ?? ''}, decode ${d.status} ${d.code ?? ''}`,
    );
    roomOk(`${name}: the next room lands (the aborted room's pages excluded)`, await moveRoom(pd, rooms(601, 100, 16, 2)));
  } catch (e) {
    check(name, false, (e as Error).message);
  } finally {
    if (pd) await closeAll([...pd.prefills, ...pd.decodes]);
  }
}

async function ecDevicePoolCase(): Promise<void> {
  const name = 'EC producer with a device pool (cuda:0)';
  // The engine allocates the pool through a transport that allocates device memory: mooncake-nvlink's fabric allocator (posix-fd handles).
  const engine = await createTransferEngine({
    connector: 'mooncake-tcp',
    transports: ['mooncake-nvlink'],
    transportOptions: { 'mooncake-nvlink': { handleType: 'posix-fd' } },
    bindAddress: '127.0.0.1',
  });
  try {
    const producer = await createECProducer({ engine, poolBytes: 64 << 20, poolDevice: 'cuda:0' });
    check(
      `${name}: allocated and registered on cuda:0`,
      producer.pool.memory.device === 'cuda:0' && !producer.pool.memory.buffer,
      `device ${producer.pool.memory.device}`,
    );
    const saved = await producer.save('item', new Uint8Array(4096)).then(
      () => 'saved',
      (e: unknown) => (isTransferError(e) ? e.code : String(e)),
    );
    if (saved !== 'saved')
      results.gaps.push(
        `EC device pool: save() takes a host view only (${saved}); a save from a device address, and a consumer pulling into device memory, are not in @te/disagg yet`,
      );
    await producer.close();
  } catch (e) {
    check(name, false, (e as Error).message);
  } finally {
    await engine.close();
  }
}

const load = addonLoader<NativeCudaModule>({
  plugin: 'mooncake-intra-nvlink',
  pkg: '@te/mooncake-intra-nvlink',
  addon: 'te_mooncake_intra_nvlink.node',
  envVar: 'TE_MOONCAKE_INTRA_NVLINK_ADDON',
  root: join(root, 'plugins', 'mooncake-intra-nvlink'),
});
const probe = probeCuda(load);
results.device = probe.details ?? null;
if (HOST) {
  results.device = 'host rehearsal (TE_GPU_RUNTIME_HOST=1): KV in host memory, no GPU path exercised';
} else if (!probe.available) {
  results.failures.push(`no usable GPU: ${probe.reason}`);
  save();
  log(`no usable GPU: ${probe.reason}`);
  process.exit(2);
}
if (!HOST) results.gaps.push('TP 2→4 with KV in device memory goes the per-token path: the @te/staging copier gathers host memory only');
if (!HOST) results.gaps.push('te demo --device cuda:N is not implemented');
if (CASES.has('pd')) for (const c of CONNECTORS) await pdCase(c, 1, 1);
if (CONNECTORS.includes(MAIN)) {
  if (CASES.has('pd-2-4')) await pdCase(MAIN, 2, 4);
  if (CASES.has('layerwise')) await layerwiseCase();
  if (CASES.has('restart')) await restartCase();
  if (CASES.has('abort')) await abortCase();
  if (CASES.has('ec') && !HOST) await ecDevicePoolCase();
}
save();
log(`${results.checks.filter((c) => c.ok).length}/${results.checks.length} checks passed; figures and gaps in ${join(OUT, 'runtime-results.json')}`);
process.exit(results.failures.length === 0 ? 0 : 1);
