import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pc from 'picocolors';
import { loadConfig } from '@te/connector';
import { postJson } from './http.js';
import { embeddingBytes, rowBytes, type ModelSpec } from './model.js';
import { startProxy, type Timings } from './proxy.js';
import type { WorkerSpec } from './worker.js';

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

interface Worker {
  child: ChildProcess;
  port: number;
  bootstrapPort?: number;
}

function spawnWorker(spec: WorkerSpec): Promise<Worker> {
  const script = fileURLToPath(new URL('./demo-worker.js', import.meta.url));
  const child = fork(script, [], { env: { ...process.env, TE_DEMO_WORKER: JSON.stringify(spec) }, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the ${spec.role} worker exited (${code}) before it was ready`)));
    child.once('message', (m: { ready: boolean; error?: string; port: number; bootstrapPort?: number }) => {
      if (!m.ready) return reject(new Error(`the ${spec.role} worker failed to start: ${m.error}`));
      child.removeAllListeners('exit');
      resolve({ child, port: m.port, ...(m.bootstrapPort !== undefined ? { bootstrapPort: m.bootstrapPort } : {}) });
    });
  });
}

const ms = (x: number | undefined) => (x === undefined ? '—' : x.toFixed(1));

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
  const model: ModelSpec = {
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
  const tokensPerRequest = o.tokens + 2 * o.imageTokens;
  const pagesPerRequest = Math.ceil(tokensPerRequest / model.pageSize);
  const pages = pagesPerRequest * (o.concurrency + 1);
  const base = { model, config: engineConfig, pages, slots: o.concurrency + 1, poolBytes: Math.max(1, o.poolImages) * (embeddingBytes(model) + 64) };
  const out = (line: string) => (o.json ? process.stderr.write(`${line}\n`) : console.log(line));
  const kvPerRequest = 2 * o.layers * tokensPerRequest * rowBytes(model);
  out(pc.bold(`te demo: encoder → prefill → decode over ${config.connector}, each its own process, behind an OpenAI-style proxy (loopback)`));
  out(
    `  ${o.requests} requests × (${o.tokens} text + 2 × ${o.imageTokens} image tokens), ${o.images} distinct images (${(embeddingBytes(model) / 1024).toFixed(0)} KiB embeddings, pool holds ${o.poolImages}), ${o.layers} layers × ${o.layerMs} ms, ${(kvPerRequest / 2 ** 20).toFixed(1)} MiB of KV per request, concurrency ${o.concurrency}`,
  );
  const workers: Worker[] = [];
  let proxy: Awaited<ReturnType<typeof startProxy>> | undefined;
  try {
    const [encoder, prefill, decode] = await Promise.all([
      spawnWorker({ ...base, role: 'encoder' }),
      spawnWorker({ ...base, role: 'prefill' }),
      spawnWorker({ ...base, role: 'decode' }),
    ]);
    workers.push(encoder, prefill, decode);
    const url = (w: Worker) => `http://127.0.0.1:${w.port}`;
    proxy = await startProxy({
      encoder: url(encoder),
      prefill: url(prefill),
      decode: url(decode),
      bootstrap: { host: '127.0.0.1', port: prefill.bootstrapPort! },
    });
    const endpoint = `http://127.0.0.1:${proxy.port}/v1/chat/completions`;
    const rows: Row[] = [];
    let done = 0;
    const progress = () => {
      if (!o.json && process.stdout.isTTY) process.stdout.write(`\r  ${done}/${o.requests} requests done${done === o.requests ? '\n' : ''}`);
    };
    const send = async (i: number): Promise<void> => {
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
        rows.push({
          id: i + 1,
          images: images.length,
          ok: true,
          verified: r.te.verified,
          ...r.te.timings,
          ...(r.te.mismatch ? { error: r.te.mismatch } : {}),
          expectedFailure: fail,
        });
      } catch (e) {
        rows.push({ id: i + 1, images: images.length, ok: false, verified: false, error: (e as Error).message, expectedFailure: fail });
      }
      done++;
      progress();
    };
    const queue = Array.from({ length: o.requests }, (_, i) => i);
    await Promise.all(
      Array.from({ length: Math.min(o.concurrency, o.requests) }, async () => {
        for (let i = queue.shift(); i !== undefined; i = queue.shift()) await send(i);
      }),
    );
    rows.sort((a, b) => a.id - b.id);
    const stats = {
      encoder: (await fetch(`${url(encoder)}/stats`).then((r) => r.json())) as {
        encoded: number;
        reused: number;
        notPooled: number;
        evictions: number;
        pulls: number;
      },
      prefill: (await fetch(`${url(prefill)}/stats`).then((r) => r.json())) as { localEncodes: number; layerwise: { layerwiseRooms: number } },
    };
    const passed = rows.every((r) => (r.expectedFailure ? !r.ok : r.verified));
    if (o.json) {
      console.log(JSON.stringify({ connector: config.connector, passed, rows, stats }));
      return passed;
    }
    out('');
    out(
      `  ${'req'.padStart(3)}  ${'encode'.padStart(7)}  ${'EC xfer'.padStart(7)}  ${'prefill'.padStart(7)}  ${'KV xfer'.padStart(7)}  ${'1st tok'.padStart(7)}  ${'total'.padStart(7)}  ${'bytes'.padStart(9)}  verified`,
    );
    for (const r of rows) {
      const mark = r.expectedFailure
        ? r.ok
          ? pc.red('✘ expected an error')
          : pc.yellow(`✔ refused as expected: ${r.error?.slice(0, 60)}`)
        : r.verified
          ? pc.green('✔')
          : pc.red(`✘ ${r.error ?? ''}`);
      out(
        `  ${String(r.id).padStart(3)}  ${ms(r.encodeMs).padStart(7)}  ${ms(r.ecMs).padStart(7)}  ${ms(r.prefillMs).padStart(7)}  ${ms(r.kvMs).padStart(7)}  ${ms(r.firstTokenMs).padStart(7)}  ${ms(r.totalMs).padStart(7)}  ${(r.bytes ? `${(r.bytes / 2 ** 20).toFixed(1)} MiB` : '—').padStart(9)}  ${mark}`,
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
    return passed;
  } finally {
    await new Promise<void>((r) => (proxy ? proxy.server.close(() => r()) : r()));
    await Promise.all(
      workers.map(
        (w) =>
          new Promise<void>((r) => {
            w.child.once('exit', () => r());
            w.child.send({ op: 'stop' }, () => undefined);
            setTimeout(() => w.child.kill('SIGKILL'), 5_000).unref();
          }),
      ),
    );
  }
}
