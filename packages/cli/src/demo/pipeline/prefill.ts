import { KVStatus, TransferError, type ECTransferParams, type TransferEngine } from '@te/connector';
import { createECConsumer, createKVManager } from '@te/disagg';
import { serveJson } from './http.js';
import { allocateKv, AUX_BYTES, scatterRows } from './kv-memory.js';
import { busyWait, embeddingBytes, encode, fillKv, firstToken, mmHashOf, rowBytes, tokenCount, tokenSeeds, type ChatRequest, type ModelSpec } from './model.js';
import { PageAllocator, RegionAllocator } from './pages.js';

const layout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };

/**
 * The prefill worker: pulls the request's embeddings from the encoder (encoding locally
 * what failed), runs the forward pass layer by layer, and sends each layer's KV to the
 * decode as soon as it is computed (layerwise), then the first token in the aux slot.
 */
export async function startPrefill(engine: TransferEngine, m: ModelSpec, pages: number, slots: number, host = '127.0.0.1') {
  const mem = await allocateKv(engine, m, pages, slots);
  const kv = await createKVManager({
    role: 'prefill',
    layout,
    buffers: mem.buffers,
    engine,
    bootstrapHost: host,
    bootstrapPort: 0,
    layerwise: true,
    timeouts: { bootstrapMs: 30_000, waitingMs: 30_000, heartbeatMs: 1_000 },
  });
  const ecBytes = 64 * embeddingBytes(m);
  const ecMem = await engine.allocateMemory(ecBytes);
  const ecCache = new RegionAllocator(ecBytes);
  const pageAlloc = new PageAllocator(pages);
  const freeSlots = Array.from({ length: slots }, (_, i) => i);
  let localEncodes = 0;
  const { server, port } = await serveJson(
    {
      'POST /prefill': async (body: { request: ChatRequest; ec_transfer_params: ECTransferParams; bootstrap_room: string }) => {
        const r = body.request;
        const n = tokenCount(m, r);
        const reqPages = pageAlloc.allocate(Math.ceil(n / m.pageSize));
        const slot = freeSlots.shift();
        if (slot === undefined) throw new TransferError('POOL_EXHAUSTED', 'no free aux slot');
        const keys: string[] = [];
        let consumer: Awaited<ReturnType<typeof createECConsumer>> | undefined;
        try {
          // Encoder cache: pull what the encoder has, encode locally what failed.
          const t0 = performance.now();
          consumer = await createECConsumer({ engine, loadTimeoutMs: 10_000 });
          const where = new Map<string, number>();
          consumer.startLoad(body.ec_transfer_params ?? {}, (hash, length) => {
            const key = `${r.id}/${hash}`;
            keys.push(key);
            const off = ecCache.allocate(key, Number(length));
            where.set(hash, off);
            return { addr: ecMem.addr + BigInt(off) };
          });
          const loaded = await consumer.waitForLoad();
          const ecMs = performance.now() - t0;
          const embeddings = new Map<string, Uint8Array>();
          for (const h of loaded.loaded) embeddings.set(h, ecMem.buffer!.subarray(where.get(h)!, where.get(h)! + embeddingBytes(m)));
          // Fault injection for the pipeline's own tests: one wrong byte in the middle of a
          // pulled embedding's middle row must fail the decode's verification.
          if (process.env.TE_DEMO_FAULT === 'corrupt-embedding' && loaded.loaded.length > 0)
            embeddings.get(loaded.loaded[0]!)![Math.floor(m.imageTokens / 2) * m.hidden * 2 + m.hidden] ^= 0x01;
          for (const url of r.images) {
            const h = mmHashOf(url);
            if (embeddings.has(h)) continue;
            busyWait(m.encodeMs);
            embeddings.set(h, encode(m, h));
            localEncodes++;
          }
          const seeds = tokenSeeds(m, r, embeddings);

          // Forward pass, layer by layer; each layer's KV leaves as soon as it is written.
          const sender = kv.createSender({ host, port: kv.bootstrapServer!.port, room: BigInt(body.bootstrap_room) });
          sender.init(reqPages.length, slot);
          await sender.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 30_000 });
          const batch = kv.beginBatch([{ sender, pages: reqPages }]);
          const rows = new Uint8Array(reqPages.length * mem.itemBytes);
          const t1 = performance.now();
          for (let l = 0; l < m.layers; l++) {
            busyWait(m.layerMs);
            for (const half of [0, 1]) {
              fillKv(m, seeds, l, half, rows.subarray(0, n * rowBytes(m)));
              scatterRows(mem, half * m.layers + l, reqPages, rows.subarray(0, n * rowBytes(m)));
            }
            // Fault injection for the pipeline's own tests: one wrong KV byte must fail verification.
            if (l === 0 && process.env.TE_DEMO_FAULT === 'corrupt-kv') mem.kv[0]![reqPages[0]! * mem.itemBytes] ^= 0xff;
            batch.layerReady(l);
            await new Promise((res) => setImmediate(res)); // let the layer's write go out under the next layer's compute
          }
          const token = firstToken(seeds);
          new DataView(mem.aux.buffer, mem.aux.byteOffset + slot * AUX_BYTES, AUX_BYTES).setUint32(0, token, true);
          const prefillMs = performance.now() - t1;
          const [result] = await batch.finish();
          const tailMs = performance.now() - t1 - prefillMs;
          if (result!.status !== KVStatus.Success) throw result!.error ?? new TransferError('TRANSFER_FAILED', `room ${body.bootstrap_room} failed`);
          return { first_token: token, ecMs, prefillMs, kvTailMs: tailMs, ecLoaded: loaded.loaded.length, ecFailed: loaded.failed.length };
        } finally {
          // A pull given up at its timeout may still be writing its destination: reuse the
          // encoder-cache range only once every pull of this request has been answered.
          await consumer?.close();
          for (const k of keys) ecCache.release(k);
          pageAlloc.release(reqPages);
          freeSlots.push(slot);
        }
      },
      'GET /stats': async () => ({ localEncodes, layerwise: kv.layerwiseStats }),
    },
    0,
    host,
  );
  return { port, bootstrapPort: kv.bootstrapServer!.port, close: async () => (server.close(), await kv.close()) };
}
