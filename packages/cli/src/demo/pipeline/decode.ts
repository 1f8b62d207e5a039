import { KVStatus, TransferError, type TransferEngine } from '@te/connector';
import { createKVManager } from '@te/disagg';
import { serveJson } from './http.js';
import { allocateKv, AUX_BYTES, compareRows } from './kv-memory.js';
import { encode, fillKv, firstToken, mmHashOf, rowBytes, tokenCount, tokenSeeds, type ChatRequest, type ModelSpec } from './model.js';
import { PageAllocator } from './pages.js';

const layout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };

/**
 * The decode worker: receives the request's KV and first token from the prefill, then
 * checks every byte against what the encoder and the prefill must have computed.
 */
export async function startDecode(engine: TransferEngine, m: ModelSpec, pages: number, slots: number, host = '127.0.0.1') {
  const mem = await allocateKv(engine, m, pages, slots);
  const kv = await createKVManager({
    role: 'decode',
    layout,
    buffers: mem.buffers,
    engine,
    timeouts: { bootstrapMs: 30_000, waitingMs: 30_000, heartbeatMs: 1_000 },
  });
  const pageAlloc = new PageAllocator(pages);
  const freeSlots = Array.from({ length: slots }, (_, i) => i);
  const { server, port } = await serveJson(
    {
      'POST /decode': async (body: { request: ChatRequest; bootstrap: { host: string; port: number; room: string } }) => {
        const r = body.request;
        const n = tokenCount(m, r);
        const reqPages = pageAlloc.allocate(Math.ceil(n / m.pageSize));
        const slot = freeSlots.shift();
        if (slot === undefined) throw new TransferError('POOL_EXHAUSTED', 'no free aux slot');
        try {
          const receiver = kv.createReceiver({ host: body.bootstrap.host, port: body.bootstrap.port, room: BigInt(body.bootstrap.room) });
          await receiver.init(reqPages, slot);
          const t0 = performance.now();
          await receiver.cell.reached(KVStatus.Success, { timeoutMs: 60_000 });
          const kvMs = performance.now() - t0;
          // What the encoder and prefill must have computed, recomputed here from the request.
          const embeddings = new Map(r.images.map((url) => [mmHashOf(url), encode(m, mmHashOf(url))]));
          const seeds = tokenSeeds(m, r, embeddings);
          const rows = new Uint8Array(n * rowBytes(m));
          let mismatch: string | undefined;
          for (let l = 0; l < m.layers && !mismatch; l++) {
            for (const half of [0, 1]) {
              fillKv(m, seeds, l, half, rows);
              const at = compareRows(mem, half * m.layers + l, reqPages, rows);
              if (at >= 0) {
                mismatch = `layer ${l} ${half ? 'V' : 'K'} byte ${at}`;
                break;
              }
            }
          }
          const token = new DataView(mem.aux.buffer, mem.aux.byteOffset + slot * AUX_BYTES, AUX_BYTES).getUint32(0, true);
          if (!mismatch && token !== firstToken(seeds)) mismatch = `first token ${token}, expected ${firstToken(seeds)}`;
          return { verified: mismatch === undefined, mismatch: mismatch ?? null, kvMs, bytes: 2 * m.layers * n * rowBytes(m), first_token: token };
        } finally {
          pageAlloc.release(reqPages);
          freeSlots.push(slot);
        }
      },
    },
    0,
    host,
  );
  return { port, close: async () => (server.close(), await kv.close()) };
}
