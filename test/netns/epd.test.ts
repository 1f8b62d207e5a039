import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { embeddingBytes, rowBytes, type ModelSpec } from '../../packages/cli/src/demo/pipeline/model.js';
import { startProxy } from '../../packages/cli/src/demo/pipeline/proxy.js';
import { Cluster, netnsSupport, testIf, type NodeProcess } from './harness/index.js';

/*
 * `te demo`'s EPD pipeline with its workers on three hosts: the built worker processes
 * (packages/cli/dist/demo-worker.js, as `te demo` forks them) each bound to its host's
 * address, and the demo's OpenAI-style proxy in the test process, which reaches the hosts
 * over the bridge as a router would. The encoder's embeddings cross to the prefill host,
 * the KV to the decode host, which recomputes and checks every byte of each request.
 */
const WORKER = fileURLToPath(new URL('../../packages/cli/dist/demo-worker.js', import.meta.url));
const MODEL: ModelSpec = { layers: 8, tokens: 256, imageTokens: 64, hidden: 1024, heads: 8, headDim: 64, pageSize: 16, layerMs: 4, encodeMs: 5 };
const REQUESTS = 6;
const CONCURRENCY = 3;
/** Distinct images; the encoder's pool holds them all, so none is evicted and every one is pulled, none encoded locally. */
const IMAGES = 4;

/** The proxy's reply to a completion: `te`, the pipeline's verdict, on 200 (read only then), `{ error }` otherwise. */
interface CompletionReply {
  error?: { message: string; code: string | null };
  te: { verified: boolean; mismatch: string | null };
}

testIf(
  test,
  netnsSupport(),
  'te demo pipeline with encoder, prefill and decode on three hosts over mooncake-tcp: every request verified on the decode',
  async () => {
    await Cluster.with(['encoder', 'prefill', 'decode'], async (c) => {
      const tokens = MODEL.tokens + 2 * MODEL.imageTokens;
      const pages = Math.ceil(tokens / MODEL.pageSize) * (CONCURRENCY + 1);
      const spec = (role: string) => ({
        role,
        model: MODEL,
        config: { connector: 'mooncake-tcp' },
        pages,
        slots: CONCURRENCY + 1,
        poolBytes: IMAGES * (embeddingBytes(MODEL) + 64),
        host: c.host(role).address,
      });
      const start = (role: string): Promise<NodeProcess> => c.spawn(role, WORKER, { env: { TE_DEMO_WORKER: JSON.stringify(spec(role)) } });
      const [encoder, prefill, decode] = await Promise.all([start('encoder'), start('prefill'), start('decode')]);
      const url = (role: string, w: NodeProcess) => `http://${c.host(role).address}:${w.info.port}`;
      const proxy = await startProxy({
        encoder: url('encoder', encoder),
        prefill: url('prefill', prefill),
        decode: url('decode', decode),
        bootstrap: { host: c.host('prefill').address, port: prefill.info.bootstrapPort as number },
      });
      try {
        const before = { prefill: c.counters('prefill'), decode: c.counters('decode') };
        const endpoint = `http://127.0.0.1:${proxy.port}/v1/chat/completions`;
        const rows: { i: number; status: number; body: CompletionReply }[] = [];
        const queue = Array.from({ length: REQUESTS }, (_, i) => i);
        await Promise.all(
          Array.from({ length: CONCURRENCY }, async () => {
            for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
              const images = [`synthetic://img/${i % IMAGES}.png`, `synthetic://img/${(i * 3 + 1) % IMAGES}.png`];
              const body = {
                model: 'te-synthetic',
                max_tokens: 1,
                messages: [
                  {
                    role: 'user',
                    content: [{ type: 'text', text: `describe request ${i}` }, ...images.map((u) => ({ type: 'image_url', image_url: { url: u } }))],
                  },
                ],
              };
              const res = await fetch(endpoint, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify(body),
                signal: AbortSignal.timeout(30_000),
              });
              rows.push({ i, status: res.status, body: (await res.json()) as CompletionReply });
            }
          }),
        );
        for (const r of rows) {
          assert.is(r.status, 200, `request ${r.i}: ${JSON.stringify(r.body.error)}`);
          assert.ok(r.body.te.verified, `request ${r.i}: ${r.body.te.mismatch}`);
        }
        const stats = (await (await fetch(`${url('encoder', encoder)}/stats`)).json()) as { pulls: number };
        const prefillStats = (await (await fetch(`${url('prefill', prefill)}/stats`)).json()) as { localEncodes: number };
        assert.ok(stats.pulls > 0, 'the prefill pulled embeddings from the encoder host');
        assert.is(prefillStats.localEncodes, 0, 'no image fell back to a local encode');
        // Each request's KV (K and V, every layer) crossed to the decode host.
        const kv = REQUESTS * 2 * MODEL.layers * tokens * rowBytes(MODEL);
        assert.ok(c.counters('decode').rx - before.decode.rx >= kv, "the KV crossed the decode host's link");
        assert.ok(c.counters('prefill').rx - before.prefill.rx >= stats.pulls * embeddingBytes(MODEL), "the embeddings crossed the prefill host's link");
      } finally {
        await new Promise((r) => proxy.server.close(r));
      }
    });
  },
);

test.run();
