#!/usr/bin/env node
// Layerwise KV transfer benchmark: a prefill process simulates a forward pass (a timed wait
// per layer: the event loop stays free, as it is while a GPU runs the layer) and a decode
// process receives the KV over a te transport (mooncake-tcp by default). The same request
// runs with layerwise transfer off (all KV after the last layer) and on (each layer sent as
// it is ready), interleaved in one run; every run's bytes are verified.
//
//   node bench/layerwise.mjs [--layers 32] [--tokens 8192] [--layer-ms 20] [--runs 3] [--json]
//
// TTFT here = time from the batch start to "the decode has all KV"; the tail = time from
// the last layer's compute end to that point. One layer's transfer time is the off tail
// divided by the layer count.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseCli } from '../scripts/lib/cli.mjs';
import { fileURLToPath } from 'node:url';
import { quick } from './lib/quick.mjs';
import { closeRanks, freePort, gqaBuffers, headsDigest, layoutOf, median, now, serveRank, spawnRank } from './lib/ranks.mjs';

const { values: args } = parseCli({
  usage: 'node bench/layerwise.mjs [options]',
  summary:
    'Layerwise KV transfer: one prefill-to-decode request with layerwise transfer off and on, interleaved in one run; TTFT and the transfer tail of each, every byte verified.',
  options: {
    connector: { type: 'string', default: 'mooncake-tcp', help: 'te transport to use' },
    layers: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '32', help: 'layers of the simulated model' },
    tokens: { type: 'string', number: { integer: true, min: 1, max: 1048576 }, default: '8192', help: 'tokens of the request' },
    'layer-ms': { type: 'string', number: { min: 0, max: 10000 }, default: '20', help: 'simulated compute time per layer (ms)' },
    runs: { type: 'string', number: { integer: true, min: 1, max: 100 }, default: '3', help: 'runs of each mode (medians reported)' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
    rank: { type: 'string', hidden: true, help: "internal: a forked child's role" },
  },
});
quick(args, { layers: '8', tokens: '512', runs: '1', 'layer-ms': '5' });
const HEADS = 8;
const HEAD_BYTES = 256; // 128 dim × fp16
const PAGE = 64;

if (args.rank) {
  const spec = JSON.parse(args.rank);
  const { createTransferEngine, KVStatus } = await import('@te/connector');
  const { createKVManager } = await import('@te/disagg');
  const engine = await createTransferEngine({ connector: spec.connector, bindAddress: '127.0.0.1' });
  const { mem, item, buffers } = await gqaBuffers(engine, {
    layers: spec.layers,
    pages: spec.pages,
    heads: HEADS,
    headsTotal: HEADS,
    headBytes: HEAD_BYTES,
    pageSize: PAGE,
    fill: spec.role === 'prefill' ? 7 : 0,
  });
  const manager = await createKVManager({
    role: spec.role,
    layout: layoutOf(1, 0),
    buffers,
    engine,
    bootstrapHost: '127.0.0.1',
    bootstrapPort: spec.port,
    layerwise: true,
    timeouts: { transferMs: 120_000 },
  });
  const delay = monitorEventLoopDelay({ resolution: 1 });
  const receivers = new Map();
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  serveRank({
    receive: async (a) => {
      const r = manager.createReceiver({ host: '127.0.0.1', port: spec.port, room: BigInt(a.room) });
      receivers.set(a.room, r);
      await r.init(Uint32Array.from(a.pages), 0);
      return true;
    },
    wait: async (a) => {
      await receivers.get(a.room).cell.reached(KVStatus.Success);
      const t = now();
      receivers.delete(a.room);
      return { t };
    },
    /** One forward pass: `layerMs` per layer, then (layerwise) layerReady; at the end finish or send everything. */
    forward: async (a) => {
      const sender = manager.createSender({ host: '127.0.0.1', port: spec.port, room: BigInt(a.room) });
      const pages = Uint32Array.from(a.pages);
      sender.init(pages.length, 0);
      await sender.cell.reached(KVStatus.WaitingForInput);
      delay.reset();
      delay.enable();
      const t0 = now();
      const batch = a.layerwise ? manager.beginBatch([{ sender, pages }]) : undefined;
      for (let l = 0; l < spec.layers; l++) {
        await sleep(a.layerMs);
        batch?.layerReady(l);
      }
      const computed = now();
      if (batch) {
        const [r] = await batch.finish();
        if (r.status !== KVStatus.Success) throw r.error;
      } else {
        await sender.send(pages, { last: true });
      }
      delay.disable();
      return { t0, computed, p99DelayMs: delay.percentile(99) / 1e6, stats: manager.layerwiseStats };
    },
    // TE_BENCH_CORRUPT_BYTE (the verifier's own test): the decode flips one received byte first.
    digest: async (a) => (
      spec.role === 'decode' && process.env.TE_BENCH_CORRUPT_BYTE ? (mem.buffer[a.pages[0] * item + 1] ^= 0xff) : 0,
      headsDigest(mem.buffer, {
        buffers: 2 * spec.layers,
        item,
        pages: a.pages,
        pageSize: PAGE,
        headBytes: HEAD_BYTES,
        rowHeads: HEADS,
        headOffset: 0,
        heads: HEADS,
        bufferBytes: item * spec.pages,
      })
    ),
    close: async () => {
      await manager.close();
      await engine.close();
      setImmediate(() => process.exit(0));
      return true;
    },
  });
  await new Promise(() => {});
}

const layers = Number(args.layers);
const layerMs = Number(args['layer-ms']);
const pagesPerRoom = Math.ceil(Number(args.tokens) / PAGE);
const log = (...a) => (args.json ? process.stderr.write(a.join(' ') + '\n') : console.log(...a));
const port = await freePort();
const script = fileURLToPath(import.meta.url);
const base = { connector: args.connector, layers, pages: pagesPerRoom + 8, port };
const [prefill, decode] = await Promise.all([spawnRank(script, { ...base, role: 'prefill' }), spawnRank(script, { ...base, role: 'decode' })]);
const kvBytes = pagesPerRoom * PAGE * HEADS * HEAD_BYTES * 2 * layers;
log(
  `layerwise benchmark over ${args.connector}: ${layers} layers × ${layerMs} ms compute, ${args.tokens} tokens GQA ${HEADS}×128 fp16 = ${(kvBytes / 2 ** 20).toFixed(0)} MiB of KV (two processes, loopback)`,
);
const results = { off: [], on: [] };
const delays = [];
try {
  const src = Array.from({ length: pagesPerRoom }, (_, i) => i);
  const want = await prefill.call('digest', { pages: src });
  let room = 1;
  for (let k = 0; k < Number(args.runs) + 1; k++) {
    for (const mode of ['off', 'on']) {
      const id = String(room++);
      const dst = src.map((p) => (p + 8 * (room % 2)) % (pagesPerRoom + 8));
      await decode.call('receive', { room: id, pages: dst });
      const [f, w] = await Promise.all([
        prefill.call('forward', { room: id, pages: src, layerMs, layerwise: mode === 'on' }),
        decode.call('wait', { room: id }),
      ]);
      if ((await decode.call('digest', { pages: dst })) !== want) throw new Error(`run ${id} (layerwise ${mode}): the decode's KV differs from the prefill's`);
      if (mode === 'on' && f.stats.fallbacks && Object.keys(f.stats.fallbacks).length)
        throw new Error(`layerwise fell back: ${JSON.stringify(f.stats.fallbacks)}`);
      if (k === 0) continue; // warm-up
      results[mode].push({ ttft: w.t - f.t0, tail: w.t - f.computed, compute: f.computed - f.t0 });
      delays.push(f.p99DelayMs);
    }
  }
} finally {
  await closeRanks([prefill, decode]);
}
const m = (mode, key) => median(results[mode].map((r) => r[key]));
const out = {
  connector: args.connector,
  layers,
  layerComputeMs: layerMs,
  kvBytes,
  computeMs: m('off', 'compute'),
  ttftOffMs: m('off', 'ttft'),
  ttftOnMs: m('on', 'ttft'),
  tailOffMs: m('off', 'tail'),
  tailOnMs: m('on', 'tail'),
  layerTransferMs: m('off', 'tail') / layers,
  eventLoopP99Ms: Math.max(...delays),
};
out.tailHiddenFraction = Math.max(0, Math.min(1, 1 - out.tailOnMs / out.tailOffMs));
const f = (x) => x.toFixed(1);
log(
  `compute ${f(out.computeMs)} ms; KV transfer tail without layerwise ${f(out.tailOffMs)} ms (${f((100 * out.tailOffMs) / out.computeMs)}% of compute), one layer ≈ ${f(out.layerTransferMs)} ms`,
);
log(`TTFT   off ${f(out.ttftOffMs)} ms   on ${f(out.ttftOnMs)} ms   (${f((100 * (out.ttftOffMs - out.ttftOnMs)) / out.ttftOffMs)}% lower)`);
log(
  `tail   off ${f(out.tailOffMs)} ms   on ${f(out.tailOnMs)} ms = ${f(out.tailOnMs / out.layerTransferMs)}× one layer's transfer (target ≤ 1.5×); ${f(100 * out.tailHiddenFraction)}% of the tail hidden`,
);
log(`prefill event loop p99 delay during the runs: ${f(out.eventLoopP99Ms)} ms; every run verified (sha256 of the decode's pages = the prefill's)`);
if (args.json) console.log(JSON.stringify(out));
process.exit(0);
