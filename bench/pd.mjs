#!/usr/bin/env node
// PD KV transfer benchmark: prefill and decode ranks in their own processes over a te
// transport (mooncake-tcp by default), on loopback.
//
//   node bench/pd.mjs [--connector mooncake-tcp] [--tokens 8192] [--layers 32] [--rooms 3] [--json]
//
// Reports, in one run:
//   - PD KV throughput (GQA 8 KV heads × 128 dim fp16, page 64) for TP 2→2 and TP 2→4, beside
//     the raw transport throughput for the same bytes between the same processes (large
//     contiguous writes, same concurrency), as a ratio; every room's bytes are verified;
//   - planning time for heterogeneous TP at 32k tokens × 64 layers, and descriptor counts
//     before and after merging page runs (equal TP, pages allocated in runs of 8);
//   - per-request overhead: p50/p99 from a 1-page send() to decode Success (TP 1→1).
// With --json the last stdout line is one JSON object.
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { quick } from './lib/quick.mjs';
import { closeRanks, freePort, gqaBuffers, headsDigest, layoutOf, median, now, percentile, serveRank, spawnRank } from './lib/ranks.mjs';

const { values: args } = parseArgs({
  options: {
    connector: { type: 'string', default: 'mooncake-tcp' },
    tokens: { type: 'string', default: '8192' },
    layers: { type: 'string', default: '32' },
    rooms: { type: 'string', default: '3' },
    requests: { type: 'string', default: '200' },
    json: { type: 'boolean', default: false },
    rank: { type: 'string' },
  },
});
quick(args, { tokens: '512', layers: '4', rooms: '1', requests: '10' });

const HEADS = 8;
const HEAD_BYTES = 128 * 2; // 128 dim × fp16
const PAGE = 64;
const RUN = 8; // decode pages are allocated in runs of 8 (shuffled), as a paged allocator hands them out


// ---------------------------------------------------------------- rank process
if (args.rank) {
  const spec = JSON.parse(args.rank);
  const { createTransferEngine, KVStatus, batchOf } = await import('@te/connector');
  const { createKVManager, shardOfRank } = await import('@te/disagg');
  const engine = await createTransferEngine({ connector: spec.connector, bindAddress: '127.0.0.1' });
  const heads = shardOfRank(HEADS, spec.tp, spec.rank).count;
  const { mem, item, bytes: kvBytes, buffers } = await gqaBuffers(engine, { layers: spec.layers, pages: spec.pages, heads, headsTotal: HEADS, headBytes: HEAD_BYTES, pageSize: PAGE, fill: spec.role === 'prefill' ? spec.rank + 1 : 0 });
  const view = mem.buffer;
  const nBuf = 2 * spec.layers;
  const layout = layoutOf(spec.tp, spec.rank);
  const manager = await createKVManager({ role: spec.role, layout, buffers, engine, bootstrapHost: '127.0.0.1', bootstrapPort: spec.port, timeouts: { transferMs: 120_000 } });
  const receivers = new Map();
  const ops = {
    info: async () => ({ segment: engine.segmentName, addr: mem.addr.toString(), bytes: kvBytes, item, heads }),
    receive: async (a) => {
      const r = manager.createReceiver({ host: '127.0.0.1', port: spec.port, room: BigInt(a.room) });
      receivers.set(a.room, r);
      await r.init(Uint32Array.from(a.pages), 0);
      return true;
    },
    wait: async (a) => {
      const r = receivers.get(a.room);
      await r.cell.reached(KVStatus.Success);
      const t = now();
      receivers.delete(a.room);
      return { t };
    },
    /** What this rank holds at `pages` (decode), or what a decode holding `heads` from `headOffset` must hold (prefill). */
    digest: async (a) => headsDigest(view, { buffers: nBuf, item, pages: a.pages, pageSize: PAGE, headBytes: HEAD_BYTES, rowHeads: heads, headOffset: a.headOffset ?? 0, heads: a.heads ?? heads, bufferBytes: item * spec.pages }),
    send: async (a) => {
      const s = manager.createSender({ host: '127.0.0.1', port: spec.port, room: BigInt(a.room) });
      s.init(a.pages.length, 0);
      const t = now();
      await s.send(Uint32Array.from(a.pages), { last: true });
      await s.cell.reached(KVStatus.Success);
      return { t, done: now() };
    },
    /** The same bytes as one PD room, written as large contiguous requests (the transport's ceiling). */
    raw: async (a) => {
      const chunk = 8 << 20;
      const reqs = [];
      for (let off = 0; off < a.bytes; off += chunk) reqs.push({ op: 'write', local: mem.addr + BigInt(off % (nBuf * item * spec.pages)), remote: BigInt(a.addr) + BigInt(off), length: Math.min(chunk, a.bytes - off) });
      const t = now();
      await engine.transfer(a.segment, batchOf(reqs), { timeoutMs: 120_000 });
      return { t, done: now() };
    },
    close: async () => {
      await manager.close();
      await engine.close();
      setImmediate(() => process.exit(0));
      return true;
    },
  };
  serveRank(ops);
  await new Promise(() => {});
}

// ---------------------------------------------------------------- orchestration
const spawn = (spec) => spawnRank(fileURLToPath(import.meta.url), spec);
const tokens = Number(args.tokens);
const layers = Number(args.layers);
const pagesPerRoom = Math.ceil(tokens / PAGE);
const bufferPages = pagesPerRoom + RUN * 4;
const log = (...a) => (args.json ? process.stderr.write(a.join(' ') + '\n') : console.log(...a));

/** Destination pages: runs of RUN consecutive pages, in shuffled order. */
function shuffledRuns(n, seed) {
  const runs = Array.from({ length: Math.ceil(n / RUN) + 2 }, (_, i) => i);
  let x = seed;
  for (let i = runs.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    const j = x % (i + 1);
    [runs[i], runs[j]] = [runs[j], runs[i]];
  }
  return runs.flatMap((r) => Array.from({ length: RUN }, (_, k) => r * RUN + k)).slice(0, n);
}

async function layoutRun(ptp, dtp) {
  const port = await freePort();
  const base = { connector: args.connector, layers, pages: bufferPages, port };
  const prefill = await Promise.all(Array.from({ length: ptp }, (_, r) => spawn({ ...base, role: 'prefill', tp: ptp, rank: r })));
  const decode = await Promise.all(Array.from({ length: dtp }, (_, r) => spawn({ ...base, role: 'decode', tp: dtp, rank: r })));
  try {
    const dInfo = await Promise.all(decode.map((d) => d.call('info')));
    const src = Array.from({ length: pagesPerRoom }, (_, i) => i);
    const pd = [];
    const raw = [];
    let bytes = 0;
    for (let k = 0; k < Number(args.rooms) + 1; k++) {
      const room = String(1000 + k);
      const dst = shuffledRuns(pagesPerRoom, k + 7);
      await Promise.all(decode.map((d) => d.call('receive', { room, pages: dst })));
      const t0 = now();
      const sends = prefill.map((p) => p.call('send', { room, pages: src }));
      const done = await Promise.all(decode.map((d) => d.call('wait', { room })));
      await Promise.all(sends);
      const t1 = Math.max(...done.map((x) => x.t));
      // Verify every decode rank's pages against its prefill rank's heads (outside the timed region).
      await Promise.all(
        decode.map(async (d, di) => {
          const per = dtp / ptp;
          const p = prefill[Math.floor(di / per)];
          const [want, got] = await Promise.all([p.call('digest', { pages: src, headOffset: (di % per) * dInfo[di].heads, heads: dInfo[di].heads }), d.call('digest', { pages: dst })]);
          if (want !== got) throw new Error(`TP ${ptp}→${dtp} room ${room}: decode rank ${di} does not hold what prefill rank ${Math.floor(di / per)} sent`);
        }),
      );
      // Bytes the decode ranks received for one room: every token's KV of every layer, all heads.
      bytes = dInfo.reduce((a, i) => a + pagesPerRoom * i.item * 2 * layers, 0);
      // Raw: each decode rank's share written by the prefill rank that serves it, same concurrency.
      const r0 = now();
      await Promise.all(decode.map((_, di) => prefill[Math.floor((di * ptp) / dtp)].call('raw', { segment: dInfo[di].segment, addr: dInfo[di].addr, bytes: pagesPerRoom * dInfo[di].item * 2 * layers })));
      const r1 = now();
      if (k === 0) continue; // warm-up: connections, descriptors, first-touch of pages
      pd.push(bytes / ((t1 - t0) / 1000));
      raw.push(bytes / ((r1 - r0) / 1000));
    }
    return { pd: median(pd), raw: median(raw), bytes };
  } finally {
    await closeRanks([...prefill, ...decode]);
  }
}

async function overhead() {
  const port = await freePort();
  const base = { connector: args.connector, layers, pages: 16, port, tp: 1, rank: 0 };
  const p = await spawn({ ...base, role: 'prefill' });
  const d = await spawn({ ...base, role: 'decode' });
  const lat = [];
  try {
    const n = Number(args.requests);
    for (let k = 0; k < n + 10; k++) {
      const room = String(50_000 + k);
      await d.call('receive', { room, pages: [k % 16] });
      const [s, w] = await Promise.all([p.call('send', { room, pages: [(k * 3) % 16] }), d.call('wait', { room })]);
      if (k >= 10) lat.push((w.t - s.t) * 1000);
    }
  } finally {
    await closeRanks([p, d]);
  }
  return { p50Us: percentile(lat, 50), p99Us: percentile(lat, 99), onePageBytes: PAGE * HEADS * HEAD_BYTES * 2 * layers };
}

async function planning() {
  const { planCopy, mergePageRuns } = await import('@te/disagg');
  const T = 32_768;
  const L = 64;
  const pages = T / PAGE;
  const srcHeads = 4;
  const dstHeads = 2;
  const table = (n, heads) => ({ addrs: Float64Array.from({ length: n }, (_, i) => 0x7f00_0000_0000 + i * 2 ** 32), lengths: new Float64Array(n).fill(pages * 2 * PAGE * heads * HEAD_BYTES), itemLens: new Float64Array(n).fill(PAGE * heads * HEAD_BYTES) });
  const pairs = Int32Array.from({ length: 4 * L }, (_, i) => Math.floor(i / 2));
  const srcItems = Uint32Array.from({ length: pages }, (_, i) => i);
  const dstItems = Uint32Array.from(shuffledRuns(pages, 3));
  const times = [];
  let sliced;
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    sliced = planCopy({ src: table(2 * L, srcHeads), dst: table(2 * L, dstHeads), bufferPairs: pairs, srcItems, dstItems, slice: { rows: PAGE, srcUnits: srcHeads, dstUnits: dstHeads, srcOffset: 2, dstOffset: 0, count: 2 } });
    times.push(performance.now() - t);
  }
  const whole = planCopy({ src: table(2 * L, srcHeads), dst: table(2 * L, srcHeads), bufferPairs: pairs, srcItems, dstItems });
  return { planningMs: median(times), heteroDescriptors: sliced.batch.opcodes.length, descriptorsBefore: whole.descriptorsBefore, descriptorsAfter: whole.batch.opcodes.length, runs: mergePageRuns(srcItems, dstItems).count };
}

const gb = (x) => (x / 1e9).toFixed(2);
log(`PD benchmark over ${args.connector}: ${layers} layers, ${tokens} tokens, page ${PAGE}, GQA ${HEADS} KV heads × 128 dim fp16 (loopback, every rank its own process)`);
const plan = await planning();
log(`planning, heterogeneous TP 2→4, 32k tokens × 64 layers: ${plan.planningMs.toFixed(1)} ms for ${plan.heteroDescriptors.toLocaleString()} descriptors (target ≤ 50 ms)`);
log(`page-run merging, equal TP, 32k tokens × 64 layers (pages in runs of ${RUN}): ${plan.descriptorsBefore.toLocaleString()} descriptors → ${plan.descriptorsAfter.toLocaleString()}`);
const eq = await layoutRun(2, 2);
log(`TP 2→2: PD ${gb(eq.pd)} GB/s, raw ${args.connector} ${gb(eq.raw)} GB/s for the same ${(eq.bytes / 2 ** 20).toFixed(0)} MiB: ratio ${(eq.pd / eq.raw).toFixed(2)} (target ≥ 0.9)`);
const het = await layoutRun(2, 4);
log(`TP 2→4: PD ${gb(het.pd)} GB/s (head-sliced, one descriptor per token per layer), raw ${gb(het.raw)} GB/s: ratio ${(het.pd / het.raw).toFixed(2)}`);
const oh = await overhead();
log(`1-page request (${(oh.onePageBytes / 1024).toFixed(0)} KiB), send() → decode Success over ${args.requests} requests: p50 ${oh.p50Us.toFixed(0)} µs, p99 ${oh.p99Us.toFixed(0)} µs`);
if (args.json) {
  console.log(
    JSON.stringify({
      connector: args.connector,
      pdBytesPerSecond: eq.pd,
      rawBytesPerSecond: eq.raw,
      ratio: eq.pd / eq.raw,
      heteroPdBytesPerSecond: het.pd,
      heteroRawBytesPerSecond: het.raw,
      heteroRatio: het.pd / het.raw,
      planningMs: plan.planningMs,
      heteroDescriptors: plan.heteroDescriptors,
      descriptorsBefore: plan.descriptorsBefore,
      descriptorsAfter: plan.descriptorsAfter,
      p50Us: oh.p50Us,
      p99Us: oh.p99Us,
    }),
  );
}
process.exit(0);
