import { KVStatus, TransferError, type ECTransferParams, type TransferEngine } from '@te/connector';
import { createECConsumer, createKVManager } from '@te/disagg';
import { serveJson } from './http.js';
import { allocateKv, AUX_BYTES, scatterRows } from './kv-memory.js';
import { busyWait, embeddingBytes, encode, fillKv, firstToken, mmHashOf, rowBytes, tokenCount, tokenSeeds, type ChatRequest, type ModelSpec } from './model.js';
import { PageAllocator, RegionAllocator } from './pages.js';

const layout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };

type KVManager = Awaited<ReturnType<typeof createKVManager>>;
type ECConsumer = Awaited<ReturnType<typeof createECConsumer>>;

/** What the prefill worker holds across requests. */
interface Prefill {
  engine: TransferEngine;
  m: ModelSpec;
  host: string;
  mem: Awaited<ReturnType<typeof allocateKv>>;
  kv: KVManager;
  ecMem: Awaited<ReturnType<TransferEngine['allocateMemory']>>;
  ecCache: RegionAllocator;
  pageAlloc: PageAllocator;
  freeSlots: number[];
  /** Images encoded here because their pull failed. */
  localEncodes: number;
}

interface PrefillBody {
  request: ChatRequest;
  ec_transfer_params: ECTransferParams;
  bootstrap_room: string;
}

/** One request's encoder-cache pull: the consumer and the cache ranges it was given, released once it closed. */
interface Pull {
  consumer?: ECConsumer;
  keys: string[];
}

/**
 * The prefill worker: pulls the request's embeddings from the encoder (encoding locally
 * what failed), runs the forward pass layer by layer, and sends each layer's KV to the
 * decode as soon as it is computed (layerwise), then the first token in the aux slot.
 */
export async function startPrefill(engine: TransferEngine, m: ModelSpec, pages: number, slots: number, host = '127.0.0.1') {
  const p = await openPrefill(engine, m, pages, slots, host);
  const { server, port } = await serveJson(
    {
      'POST /prefill': (body: PrefillBody) => prefillRequest(p, body),
      'GET /stats': async () => ({ localEncodes: p.localEncodes, layerwise: p.kv.layerwiseStats }),
    },
    0,
    host,
  );
  return { port, bootstrapPort: p.kv.bootstrapServer!.port, close: async () => (server.close(), await p.kv.close()) };
}

async function openPrefill(engine: TransferEngine, m: ModelSpec, pages: number, slots: number, host: string): Promise<Prefill> {
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
  const freeSlots = Array.from({ length: slots }, (_, i) => i);
  return { engine, m, host, mem, kv, ecMem, ecCache: new RegionAllocator(ecBytes), pageAlloc: new PageAllocator(pages), freeSlots, localEncodes: 0 };
}

async function prefillRequest(p: Prefill, body: PrefillBody) {
  const r = body.request;
  const n = tokenCount(p.m, r);
  const reqPages = p.pageAlloc.allocate(Math.ceil(n / p.m.pageSize));
  const slot = p.freeSlots.shift();
  if (slot === undefined) throw new TransferError('POOL_EXHAUSTED', 'no free aux slot');
  const pull: Pull = { keys: [] };
  try {
    const { embeddings, loaded, ecMs } = await pullEmbeddings(p, r, body.ec_transfer_params ?? {}, pull);
    encodeMissing(p, r, embeddings);
    const sent = await forwardAndSend(p, body.bootstrap_room, reqPages, slot, n, tokenSeeds(p.m, r, embeddings));
    return { first_token: sent.token, ecMs, prefillMs: sent.prefillMs, kvTailMs: sent.tailMs, ecLoaded: loaded.loaded.length, ecFailed: loaded.failed.length };
  } finally {
    // A pull given up at its timeout may still be writing its destination: reuse the
    // encoder-cache range only once every pull of this request has been answered.
    await pull.consumer?.close();
    for (const k of pull.keys) p.ecCache.release(k);
    p.pageAlloc.release(reqPages);
    p.freeSlots.push(slot);
  }
}

/** Pulls what the encoder has of the request's images into the encoder cache; by hash. */
async function pullEmbeddings(p: Prefill, r: ChatRequest, params: ECTransferParams, pull: Pull) {
  const { m, ecMem } = p;
  const t0 = performance.now();
  const consumer = (pull.consumer = await createECConsumer({ engine: p.engine, loadTimeoutMs: 10_000 }));
  const where = new Map<string, number>();
  consumer.startLoad(params, (hash, length) => {
    const key = `${r.id}/${hash}`;
    pull.keys.push(key);
    const off = p.ecCache.allocate(key, Number(length));
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
  return { embeddings, loaded, ecMs };
}

/** Encodes here the images whose pull failed. */
function encodeMissing(p: Prefill, r: ChatRequest, embeddings: Map<string, Uint8Array>): void {
  for (const url of r.images) {
    const h = mmHashOf(url);
    if (embeddings.has(h)) continue;
    busyWait(p.m.encodeMs);
    embeddings.set(h, encode(p.m, h));
    p.localEncodes++;
  }
}

/** The forward pass, layer by layer; each layer's KV leaves as soon as it is written, the first token last (aux slot). */
async function forwardAndSend(p: Prefill, room: string, reqPages: Uint32Array, slot: number, n: number, seeds: ReturnType<typeof tokenSeeds>) {
  const { m, mem, kv } = p;
  const sender = kv.createSender({ host: p.host, port: kv.bootstrapServer!.port, room: BigInt(room) });
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
  if (result!.status !== KVStatus.Success) throw result!.error ?? new TransferError('TRANSFER_FAILED', `room ${room} failed`);
  return { token, prefillMs, tailMs };
}
