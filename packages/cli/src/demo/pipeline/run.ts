import pc from 'picocolors';
import { loadConfig } from '@te/connector';
import { AUX_BYTES } from './kv-memory.js';
import { postJson } from './http.js';
import { embeddingBytes, rowBytes, type ModelSpec } from './model.js';
import { startProxy, type Timings } from './proxy.js';
import type { WorkerSpec } from './worker.js';
import { spawnWorker, stopWorkers, type RunningWorkers, type Worker } from './workers.js';

export interface PipelineOptions {
  connector?: string;
  modulePath?: string;
  layers: number;
  tokens: number;
  imageTokens: number;
  hidden: number;
  requests: number;
  concurrency: number;
  layerMs: number;
  encodeMs: number;
  /** Distinct images the requests draw from (fewer than requests × 2: they share). */
  images: number;
  /** Encoder pool, in images it holds (smaller than `images`: eviction runs). */
  poolImages: number;
  /** Requests (1-based) whose image the encoder fails on (tests: the proxy answers with an error). */
  failEncoder: number[];
  json: boolean;
}

interface Row extends Partial<Timings> {
  id: number;
  images: number;
  ok: boolean;
  verified: boolean;
  error?: string;
  expectedFailure: boolean;
}

const ms = (x: number | undefined) => (x === undefined ? '—' : x.toFixed(1));

type Proxy = Awaited<ReturnType<typeof startProxy>>;
type Out = (line: string) => void;

/** What runs while the demo does, for `stopPipeline` to close whatever started. */
interface Running extends RunningWorkers {
  proxy?: Proxy;
}

interface Started {
  encoder: Worker;
  prefill: Worker;
  decode: Worker;
  /** The proxy's chat completions URL. */
  endpoint: string;
}

interface Stats {
  encoder: { encoded: number; reused: number; notPooled: number; evictions: number; pulls: number };
  prefill: { localEncodes: number; layerwise: { layerwiseRooms: number } };
}

const workerUrl = (w: Worker) => `http://127.0.0.1:${w.port}`;

/**
 * The README's main job: an encoder, a prefill and a decode worker (each its own process)
 * and an OpenAI-style proxy on loopback; a set of multimodal requests, some sharing images,
 * sent concurrently; a table of per-stage times; every request's KV and embeddings
 * verified on the decode. Exit code 0 only when every request verified.
 */
export async function runPipeline(o: PipelineOptions): Promise<boolean> {
  // The same configuration path as every command (env, $TE_CONFIG, --connector, --module-path).
  const config = loadConfig({ json: { ...(o.connector ? { connector: o.connector } : {}), ...(o.modulePath ? { modulePath: o.modulePath } : {}) } });
  const engineConfig = { connector: config.connector, ...(config.modulePath ? { modulePath: config.modulePath } : {}) };
  const model = modelOf(o);
  const out: Out = (line) => (o.json ? process.stderr.write(`${line}\n`) : console.log(line));
  printPlan(o, model, config.connector, out);
  const running: Running = { children: [], ready: new Set() };
  try {
    const started = await startPipeline(o, model, engineConfig, running);
    const rows = await driveRequests(o, started.endpoint);
    const { passed, stats } = await verify(rows, started);
    if (o.json) console.log(JSON.stringify({ connector: config.connector, passed, rows, stats }));
    else printReport(rows, stats, passed, out);
    return passed;
  } finally {
    await stopPipeline(running);
  }
}

function modelOf(o: PipelineOptions): ModelSpec {
  return {
    layers: o.layers,
    tokens: o.tokens,
    imageTokens: o.imageTokens,
    hidden: o.hidden,
    heads: 8,
    headDim: 64,
    pageSize: 16,
    layerMs: o.layerMs,
    encodeMs: o.encodeMs,
  };
}

const tokensPerRequest = (o: PipelineOptions) => o.tokens + 2 * o.imageTokens;

function printPlan(o: PipelineOptions, model: ModelSpec, connector: string, out: Out): void {
  const kvPerRequest = 2 * o.layers * tokensPerRequest(o) * rowBytes(model);
  out(pc.bold(`te demo: encoder → prefill → decode over ${connector}, each its own process, behind an OpenAI-style proxy (loopback)`));
  out(
    `  ${o.requests} requests × (${o.tokens} text + 2 × ${o.imageTokens} image tokens), ${o.images} distinct images (${(embeddingBytes(model) / 1024).toFixed(0)} KiB embeddings, pool holds ${o.poolImages}), ${o.layers} layers × ${o.layerMs} ms, ${(kvPerRequest / 2 ** 20).toFixed(1)} MiB of KV per request, concurrency ${o.concurrency}`,
  );
}

/** KV pages and slots of the prefill and the decode (each), and the encoder's pool. */
function workerSizes(o: PipelineOptions): { pages: number; slots: number; poolBytes: number } {
  const model = modelOf(o);
  return {
    pages: Math.ceil(tokensPerRequest(o) / model.pageSize) * (o.concurrency + 1),
    slots: o.concurrency + 1,
    poolBytes: Math.max(1, o.poolImages) * (embeddingBytes(model) + 64),
  };
}

/** Memory the three workers allocate for transfers: the prefill's and the decode's KV caches and the encoder's pool. */
export function pipelineMemoryBytes(o: PipelineOptions): number {
  const model = modelOf(o);
  const { pages, slots, poolBytes } = workerSizes(o);
  return 2 * (2 * model.layers * pages * model.pageSize * rowBytes(model) + slots * AUX_BYTES) + poolBytes;
}

/** The three workers and the proxy in front of them; what started is recorded in `running`. */
async function startPipeline(o: PipelineOptions, model: ModelSpec, config: WorkerSpec['config'], running: Running): Promise<Started> {
  const base = { model, config, ...workerSizes(o) };
  const [encoder, prefill, decode] = await Promise.all([
    spawnWorker({ ...base, role: 'encoder' }, running),
    spawnWorker({ ...base, role: 'prefill' }, running),
    spawnWorker({ ...base, role: 'decode' }, running),
  ]);
  running.proxy = await startProxy({
    encoder: workerUrl(encoder),
    prefill: workerUrl(prefill),
    decode: workerUrl(decode),
    bootstrap: { host: '127.0.0.1', port: prefill.bootstrapPort! },
  });
  return { encoder, prefill, decode, endpoint: `http://127.0.0.1:${running.proxy.port}/v1/chat/completions` };
}

/** Sends every request through the proxy, `concurrency` at a time; one row each, in request order. */
async function driveRequests(o: PipelineOptions, endpoint: string): Promise<Row[]> {
  const rows: Row[] = [];
  const progress = () => {
    if (!o.json && process.stdout.isTTY) process.stdout.write(`\r  ${rows.length}/${o.requests} requests done${rows.length === o.requests ? '\n' : ''}`);
  };
  const queue = Array.from({ length: o.requests }, (_, i) => i);
  await Promise.all(
    Array.from({ length: Math.min(o.concurrency, o.requests) }, async () => {
      for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
        rows.push(await sendRequest(o, endpoint, i));
        progress();
      }
    }),
  );
  return rows.sort((a, b) => a.id - b.id);
}

/** Request `i`: two images (shared with other requests), made to fail at the encoder when `failEncoder` names it. */
async function sendRequest(o: PipelineOptions, endpoint: string, i: number): Promise<Row> {
  const fail = o.failEncoder.includes(i + 1);
  const images = [`synthetic://img/${i % o.images}.png`, `synthetic://img/${(i * 3 + 1) % o.images}.png`].map((u) => (fail ? `${u}?fail-encoder` : u));
  const body = {
    model: 'te-synthetic',
    max_tokens: 1,
    messages: [
      { role: 'user', content: [{ type: 'text', text: `describe request ${i}` }, ...images.map((u) => ({ type: 'image_url', image_url: { url: u } }))] },
    ],
  };
  try {
    const r = await postJson<{ te: { timings: Timings; verified: boolean; mismatch: string | null } }>(endpoint, body, 120_000);
    return {
      id: i + 1,
      images: images.length,
      ok: true,
      verified: r.te.verified,
      ...r.te.timings,
      ...(r.te.mismatch ? { error: r.te.mismatch } : {}),
      expectedFailure: fail,
    };
  } catch (e) {
    return { id: i + 1, images: images.length, ok: false, verified: false, error: (e as Error).message, expectedFailure: fail };
  }
}

/** Passed when every request verified on the decode and every request meant to fail was refused; with the workers' counters. */
async function verify(rows: Row[], started: Started): Promise<{ passed: boolean; stats: Stats }> {
  const stats: Stats = {
    encoder: (await fetch(`${workerUrl(started.encoder)}/stats`).then((r) => r.json())) as Stats['encoder'],
    prefill: (await fetch(`${workerUrl(started.prefill)}/stats`).then((r) => r.json())) as Stats['prefill'],
  };
  return { passed: rows.every((r) => (r.expectedFailure ? !r.ok : r.verified)), stats };
}

function verdictMark(r: Row): string {
  if (r.expectedFailure) return r.ok ? pc.red('✘ expected an error') : pc.yellow(`✔ refused as expected: ${r.error?.slice(0, 60)}`);
  return r.verified ? pc.green('✔') : pc.red(`✘ ${r.error ?? ''}`);
}

function printReport(rows: Row[], stats: Stats, passed: boolean, out: Out): void {
  out('');
  out(
    `  ${'req'.padStart(3)}  ${'encode'.padStart(7)}  ${'EC xfer'.padStart(7)}  ${'prefill'.padStart(7)}  ${'KV xfer'.padStart(7)}  ${'1st tok'.padStart(7)}  ${'total'.padStart(7)}  ${'bytes'.padStart(9)}  verified`,
  );
  for (const r of rows) {
    out(
      `  ${String(r.id).padStart(3)}  ${ms(r.encodeMs).padStart(7)}  ${ms(r.ecMs).padStart(7)}  ${ms(r.prefillMs).padStart(7)}  ${ms(r.kvMs).padStart(7)}  ${ms(r.firstTokenMs).padStart(7)}  ${ms(r.totalMs).padStart(7)}  ${(r.bytes ? `${(r.bytes / 2 ** 20).toFixed(1)} MiB` : '—').padStart(9)}  ${verdictMark(r)}`,
    );
  }
  out('  (milliseconds; KV xfer = the transfer tail after the last layer, the rest overlapped with compute)');
  out(
    `  encoder: ${stats.encoder.encoded} images encoded, ${stats.encoder.reused} reused from the pool, ${stats.encoder.evictions} evicted, ${stats.encoder.notPooled} not pooled (pool busy); prefill: ${stats.encoder.pulls} EC pulls, ${stats.prefill.localEncodes} image(s) encoded locally after a failed pull; ${stats.prefill.layerwise.layerwiseRooms} requests sent layer by layer`,
  );
  out(
    passed
      ? pc.green(`  ✔ every request verified: the decode holds exactly the KV and first token the prefill computed from the encoder's embeddings`)
      : pc.red('  ✘ some requests did not verify'),
  );
}

/**
 * Closes the proxy, then stops each worker: one that is ready closes its engine when asked
 * (killed if it has not exited 5 s later); one still starting, which cannot be asked yet, is
 * killed at once.
 */
async function stopPipeline(running: Running): Promise<void> {
  const { proxy } = running;
  await new Promise<void>((r) => (proxy ? proxy.server.close(() => r()) : r()));
  await stopWorkers(running);
}
