import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine, isTransferError, type TransferEngine } from '@te/connector';
import { KVConnectorScheduler, KVConnectorWorker, type KVTransferParams, type KVRequestView } from '../src/index.js';
import { freePort, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * vLLM's shape over the PD runtime, two engines over mooncake-tcp: a prefill request with
 * max_tokens 1 finishes length-capped, a test proxy copies its kv_transfer_params into the
 * decode request, the decode pulls the blocks, and getFinished reports both sides.
 */
const LAYERS = 3;
const BLOCKS = 16;
const BLOCK_BYTES = 256; // block_size 4 tokens × 64 bytes
const layout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };

async function instance(
  engine: TransferEngine,
  role: 'prefill' | 'decode',
  port: number,
  fill: (layer: number, half: number, view: Uint8Array) => void,
  layerwise = false,
) {
  const caches = [];
  const views: Uint8Array[] = [];
  for (let l = 0; l < LAYERS; l++) {
    const mem = await engine.allocateMemory(2 * BLOCKS * BLOCK_BYTES);
    const v = mem.buffer!;
    fill(l, 0, v.subarray(0, BLOCKS * BLOCK_BYTES));
    fill(l, 1, v.subarray(BLOCKS * BLOCK_BYTES));
    caches.push({ name: `model.layers.${l}.self_attn`, addr: mem.addr, length: mem.length });
    views.push(v);
  }
  const scheduler = new KVConnectorScheduler({ role, bootstrapHost: '127.0.0.1', bootstrapPort: port, engineId: `${role}-engine`, tpSize: 1, layerwise });
  const worker = new KVConnectorWorker({
    role,
    layout,
    engine,
    numBlocks: BLOCKS,
    blockSize: 4,
    kvCacheDtype: 'bf16',
    bootstrapHost: '127.0.0.1',
    bootstrapPort: port,
    layerwise,
    timeouts: { ...FAST, bootstrapMs: 3_000, waitingMs: 3_000 },
  });
  await worker.registerKvCaches(caches);
  return { scheduler, worker, views };
}

const byteOf = (l: number, half: number, block: number, i: number) => (l * 29 + half * 7 + block * 13 + i) & 0xff;

async function until<T>(f: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

type Instance = Awaited<ReturnType<typeof instance>>;

/**
 * A prefill instance (its KV filled with the pattern byteOf) and a decode instance (zeroed)
 * on their own engines and bootstrap port, shut down and closed after `body`.
 */
async function withPair(layerwise: boolean, body: (pair: { port: number; P: Instance; D: Instance }) => Promise<void>): Promise<void> {
  const port = await freePort();
  const pe = await createTransferEngine(TCP_CONFIG);
  const de = await createTransferEngine(TCP_CONFIG);
  const P = await instance(
    pe,
    'prefill',
    port,
    (l, h, v) => v.forEach((_, i) => (v[i] = byteOf(l, h, Math.floor(i / BLOCK_BYTES), i % BLOCK_BYTES))),
    layerwise,
  );
  const D = await instance(de, 'decode', port, (_l, _h, v) => v.fill(0));
  try {
    await body({ port, P, D });
  } finally {
    await D.worker.shutdown();
    await P.worker.shutdown();
    await de.close();
    await pe.close();
  }
}

test('prefill (max_tokens 1) → proxy → decode: blocks byte-exact, getFinished on both sides, a failed load reported', async () => {
  await withPair(false, async ({ port, P, D }) => {
    // Proxy → prefill: do_remote_decode, max_tokens 1.
    const pReq: KVRequestView = {
      requestId: 'p-1',
      promptTokens: 12,
      kvTransferParams: { do_remote_decode: true, do_remote_prefill: false },
      finishReason: 'length',
    };
    const pBlocks = [5, 6, 9];
    const [delay, params] = P.scheduler.requestFinished(pReq, pBlocks);
    assert.is(delay, true);
    assert.ok(params?.do_remote_prefill && params.remote_request_id && params.remote_port === port);
    P.worker.startLoadKv(P.scheduler.buildConnectorMeta());

    // Proxy copies kv_transfer_params into the decode request (as JSON, the way it travels).
    const dReq: KVRequestView = { requestId: 'd-1', promptTokens: 12, kvTransferParams: JSON.parse(JSON.stringify(params)) as KVTransferParams };
    assert.equal(D.scheduler.getNumNewMatchedTokens(dReq, 0), [12, true]);
    assert.equal(D.scheduler.getNumNewMatchedTokens(dReq, 0), [12, true], 'side-effect free');
    const dBlocks = [1, 2, 3];
    D.scheduler.updateStateAfterAlloc(dReq, dBlocks, 12);
    assert.is(dReq.kvTransferParams!.do_remote_prefill, false, 'one transfer per request');
    D.worker.startLoadKv(D.scheduler.buildConnectorMeta());
    assert.equal(D.scheduler.buildConnectorMeta(), { loads: [], sends: [] }, 'metadata resets each step');

    const recving = await until(() => {
      const f = D.worker.getFinished().recving;
      return f.size ? f : undefined;
    });
    assert.equal([...recving], ['d-1']);
    const sending = await until(() => {
      const f = P.worker.getFinished().sending;
      return f.size ? f : undefined;
    });
    assert.equal([...sending], ['p-1']);
    assert.equal([...D.worker.getBlockIdsWithLoadErrors()], []);
    for (let l = 0; l < LAYERS; l++) {
      for (let h = 0; h < 2; h++) {
        const half = D.views[l]!.subarray(h * BLOCKS * BLOCK_BYTES, (h + 1) * BLOCKS * BLOCK_BYTES);
        for (let b = 0; b < BLOCKS; b++) {
          const at = dBlocks.indexOf(b);
          const block = half.subarray(b * BLOCK_BYTES, (b + 1) * BLOCK_BYTES);
          const want = at < 0 ? new Uint8Array(BLOCK_BYTES) : Uint8Array.from({ length: BLOCK_BYTES }, (_, i) => byteOf(l, h, pBlocks[at]!, i));
          assert.ok(Buffer.compare(block, want) === 0, `layer ${l} half ${h} block ${b}`);
        }
      }
    }

    // A load whose prefill never sends: the decode reports its blocks as load errors.
    const lost: KVRequestView = { requestId: 'd-2', promptTokens: 8, kvTransferParams: { ...params, remote_request_id: '77' } };
    D.scheduler.updateStateAfterAlloc(lost, [10, 11], 8);
    D.worker.startLoadKv(D.scheduler.buildConnectorMeta());
    const failed = await until(() => {
      const f = D.worker.getFinished().recving;
      return f.size ? f : undefined;
    });
    assert.equal([...failed], ['d-2']);
    assert.equal([...D.worker.getBlockIdsWithLoadErrors()].sort(), [10, 11]);
  });
});

function checkBlocks(views: Uint8Array[], dBlocks: number[], pBlocks: number[]) {
  for (let l = 0; l < LAYERS; l++) {
    for (let h = 0; h < 2; h++) {
      const half = views[l]!.subarray(h * BLOCKS * BLOCK_BYTES, (h + 1) * BLOCKS * BLOCK_BYTES);
      for (let b = 0; b < BLOCKS; b++) {
        const at = dBlocks.indexOf(b);
        const want = at < 0 ? new Uint8Array(BLOCK_BYTES) : Uint8Array.from({ length: BLOCK_BYTES }, (_, i) => byteOf(l, h, pBlocks[at]!, i));
        assert.ok(Buffer.compare(half.subarray(b * BLOCK_BYTES, (b + 1) * BLOCK_BYTES), want) === 0, `layer ${l} half ${h} block ${b}`);
      }
    }
  }
}

test('layerwise prefill: a proxy dispatching both sides with one room sends each layer from saveKvLayer; a sequential proxy falls back (counted) and still delivers', async () => {
  await withPair(true, async ({ port, P, D }) => {
    // Both requests at once, the room chosen by the proxy.
    const room = '4242';
    const dReq: KVRequestView = {
      requestId: 'd-lw',
      promptTokens: 8,
      kvTransferParams: { do_remote_prefill: true, remote_host: '127.0.0.1', remote_port: port, remote_request_id: room },
    };
    D.scheduler.updateStateAfterAlloc(dReq, [7, 8], 8);
    D.worker.startLoadKv(D.scheduler.buildConnectorMeta());
    await until(() => ((D.worker.status('d-lw') ?? 0) >= 3 ? true : undefined)); // the prefill accepted the destination
    const pReq: KVRequestView = {
      requestId: 'p-lw',
      promptTokens: 8,
      kvTransferParams: { do_remote_decode: true, remote_request_id: room },
      finishReason: 'length',
    };
    P.scheduler.updateStateAfterAlloc(pReq, [2, 12], 0);
    P.worker.startLoadKv(P.scheduler.buildConnectorMeta()); // forward pass starts
    for (let l = 0; l < LAYERS; l++) P.worker.saveKvLayer(`model.layers.${l}.self_attn`);
    await P.worker.waitForSave();
    const [, params] = P.scheduler.requestFinished(pReq, [2, 12]);
    assert.is(params?.remote_request_id, room);
    assert.equal(P.scheduler.buildConnectorMeta().sends, [], 'no second send at request_finished');
    assert.equal(P.worker.kvManager!.layerwiseStats, { layerwiseRooms: 1, fallbacks: {} });
    await until(() => {
      const f = D.worker.getFinished().recving;
      return f.size ? f : undefined;
    });
    checkBlocks(D.views, [7, 8], [2, 12]);

    // Sequential (toy proxy): the decode comes after the prefill finished.
    const p2: KVRequestView = { requestId: 'p-seq', promptTokens: 4, kvTransferParams: { do_remote_decode: true }, finishReason: 'length' };
    P.scheduler.updateStateAfterAlloc(p2, [3], 0);
    P.worker.startLoadKv(P.scheduler.buildConnectorMeta());
    for (let l = 0; l < LAYERS; l++) P.worker.saveKvLayer(`model.layers.${l}.self_attn`);
    await P.worker.waitForSave(); // returns: the fallback does not hold the forward loop
    const [, params2] = P.scheduler.requestFinished(p2, [3]);
    assert.equal(P.worker.kvManager!.layerwiseStats.fallbacks, { 'destination-not-ready': 1 });
    const d2: KVRequestView = { requestId: 'd-seq', promptTokens: 4, kvTransferParams: JSON.parse(JSON.stringify(params2)) };
    D.scheduler.updateStateAfterAlloc(d2, [14], 4);
    D.worker.startLoadKv(D.scheduler.buildConnectorMeta());
    await until(() => {
      const f = D.worker.getFinished().recving;
      return f.size ? f : undefined;
    });
    assert.equal([...D.worker.getBlockIdsWithLoadErrors()], []);
    checkBlocks(D.views, [7, 8, 14], [2, 12, 3]);
  });
});

test("a request whose transfer cannot start (malformed room or block ids) fails alone, at once; the step's other requests still transfer", async () => {
  await withPair(false, async ({ P, D }) => {
    const pReq: KVRequestView = { requestId: 'p-ok', promptTokens: 8, kvTransferParams: { do_remote_decode: true }, finishReason: 'length' };
    const [, params] = P.scheduler.requestFinished(pReq, [1, 2]);
    const pMeta = P.scheduler.buildConnectorMeta();
    pMeta.sends.unshift({ requestId: 'p-bad', blockIds: [3], room: 'room-1' }, { requestId: 'p-frac', blockIds: [2.5], room: '905' });
    assert.not.throws(() => P.worker.startLoadKv(pMeta));
    // Block ids that are not blocks of the worker were turned into other blocks before
    // (1.5 into 1, -1 into 4294967295) and failed, if at all, only once the prefill
    // answered; each now fails before its transfer starts.
    const badBlocks = {
      'd-frac': [1.5],
      'd-neg': [-1],
      'd-past': [BLOCKS],
      'd-twice': [10, 10],
    };
    const dMeta = {
      loads: [
        { requestId: 'd-bad', blockIds: [4, 5], params: { ...params!, remote_request_id: 'not-a-number' } },
        { requestId: 'd-hex', blockIds: [6], params: { ...params!, remote_request_id: '0x10' } },
        { requestId: 'd-noport', blockIds: [9], params: { ...params!, remote_port: null } },
        ...Object.entries(badBlocks).map(([requestId, blockIds], i) => ({ requestId, blockIds, params: { ...params!, remote_request_id: String(901 + i) } })),
        { requestId: 'd-ok', blockIds: [7, 8], params: { ...params! } },
      ],
      sends: [],
    };
    assert.not.throws(() => D.worker.startLoadKv(dMeta));
    await new Promise((resolve) => setImmediate(resolve));
    const recving = new Set<string>(D.worker.getFinished().recving);
    for (const id of ['d-bad', ...Object.keys(badBlocks)]) assert.ok(recving.has(id), `${id} failed before its transfer started`);
    const errors = new Set<number>();
    await until(() => {
      for (const id of D.worker.getFinished().recving) recving.add(id);
      for (const b of D.worker.getBlockIdsWithLoadErrors()) errors.add(b);
      return recving.size === 8 ? true : undefined;
    });
    assert.equal(
      [...errors].sort((a, b) => a - b),
      [4, 5, 6, 9, 10],
      "only the malformed requests' blocks are load errors, and only ids that are blocks of the worker",
    );
    checkBlocks(D.views, [7, 8], [1, 2]);
    const sending = new Set<string>();
    await until(() => {
      for (const id of P.worker.getFinished().sending) sending.add(id);
      return sending.size === 3 ? true : undefined;
    });
    assert.equal([...sending].sort(), ['p-bad', 'p-frac', 'p-ok']);
  });
});

test('registerKvCaches: a block count, layer size, layer name or address it cannot use is INVALID_ARGUMENT (or ADDRESS_OUT_OF_RANGE), and a good call after it works', async () => {
  const engine = await createTransferEngine(TCP_CONFIG);
  const port = await freePort();
  try {
    const mem = await engine.allocateMemory(2 * BLOCKS * BLOCK_BYTES);
    const layer = { name: 'model.layers.0.self_attn', addr: mem.addr, length: mem.length };
    const worker = (numBlocks: number) =>
      new KVConnectorWorker({ role: 'decode', layout, engine, numBlocks, blockSize: 4, kvCacheDtype: 'bf16', bootstrapPort: port, timeouts: FAST });
    const cases: [number, unknown[], string, RegExp][] = [
      [0, [layer], 'INVALID_ARGUMENT', /numBlocks to be a positive integer, got 0/],
      [2.5, [layer], 'INVALID_ARGUMENT', /numBlocks to be a positive integer, got 2.5/],
      [Number.NaN, [layer], 'INVALID_ARGUMENT', /numBlocks to be a positive integer, got NaN/],
      [-BLOCKS, [layer], 'INVALID_ARGUMENT', /numBlocks to be a positive integer/],
      [BLOCKS, [{ ...layer, length: 2n * BigInt(BLOCKS) + 1n }], 'INVALID_ARGUMENT', /a multiple of 32 bytes/],
      [
        BLOCKS,
        [layer, { ...layer, name: 'model.layers.1.self_attn', length: layer.length / 2n }],
        'INVALID_ARGUMENT',
        /every layer cache must be the same size/,
      ],
      [BLOCKS, [layer, layer], 'INVALID_ARGUMENT', /layer model.layers.0.self_attn is given twice/],
      [BLOCKS, [{ ...layer, addr: -1 }], 'INVALID_ARGUMENT', /expected `addr` to be a u64 bigint/],
      [BLOCKS, [{ ...layer, length: '8192' }], 'INVALID_ARGUMENT', /expected `length` to be a u64 bigint/],
      [BLOCKS, [{ ...layer, addr: 0x1000n }], 'ADDRESS_OUT_OF_RANGE', /is not mapped in this process/],
    ];
    for (const [numBlocks, layers, code, message] of cases) {
      const e = await worker(numBlocks)
        .registerKvCaches(layers as never)
        .then(
          () => undefined,
          (x: unknown) => x as Error,
        );
      assert.ok(isTransferError(e, code as never), `${String(numBlocks)} blocks, ${layers.length} layers: ${String(e)}`);
      assert.match(e.message, message);
    }
    const good = worker(BLOCKS);
    await good.registerKvCaches([layer]);
    await good.shutdown();
  } finally {
    await engine.close();
  }
});

test("layerwise: a request that stops mid-send keeps its blocks until the aborted send settled, and the decode's load fails", async () => {
  await withPair(true, async ({ port, P, D }) => {
    const room = '5151';
    const dReq: KVRequestView = {
      requestId: 'd-stop',
      promptTokens: 8,
      kvTransferParams: { do_remote_prefill: true, remote_host: '127.0.0.1', remote_port: port, remote_request_id: room },
    };
    D.scheduler.updateStateAfterAlloc(dReq, [7, 8], 8);
    D.worker.startLoadKv(D.scheduler.buildConnectorMeta());
    await until(() => ((D.worker.status('d-stop') ?? 0) >= 3 ? true : undefined));
    const pReq: KVRequestView = {
      requestId: 'p-stop',
      promptTokens: 8,
      kvTransferParams: { do_remote_decode: true, remote_request_id: room },
      finishReason: 'stop',
    };
    P.scheduler.updateStateAfterAlloc(pReq, [2, 12], 0);
    P.worker.startLoadKv(P.scheduler.buildConnectorMeta()); // the forward pass starts sending layer by layer
    P.worker.saveKvLayer('model.layers.0.self_attn');
    // The request stops (EOS as its first token): no hand-off, but layer 0 may be in flight.
    assert.equal(P.scheduler.requestFinished(pReq, [2, 12]), [true, null], 'the blocks must stay allocated until the send ended');
    const meta = P.scheduler.buildConnectorMeta();
    assert.equal(meta.aborts, ['p-stop']);
    P.worker.startLoadKv(meta);
    await P.worker.waitForSave();
    const sending = await until(() => {
      const f = P.worker.getFinished().sending;
      return f.size ? f : undefined;
    });
    assert.equal([...sending], ['p-stop']);
    assert.is(P.worker.status('p-stop'), undefined);
    const recving = await until(() => {
      const f = D.worker.getFinished().recving;
      return f.size ? f : undefined;
    });
    assert.equal([...recving], ['d-stop']);
    assert.equal([...D.worker.getBlockIdsWithLoadErrors()].sort(), [7, 8]);
    // The entry is gone: the same request id queues a new send.
    P.scheduler.updateStateAfterAlloc(pReq, [3], 0);
    assert.equal(
      P.scheduler.buildConnectorMeta().sends.map((x) => x.requestId),
      ['p-stop'],
    );
  });
});

test('layerwise: a send that ends before requestFinished frees its blocks exactly once, reported after requestFinished (length, stop, finished_req_ids)', async () => {
  await withPair(true, async ({ port, P, D }) => {
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const cases: { id: string; room: string; reason: 'length' | 'stop'; via: 'meta' | 'ids'; dst: number[]; src: number[] }[] = [
      { id: 'p-early-len', room: '7101', reason: 'length', via: 'meta', dst: [1, 2], src: [4, 5] },
      { id: 'p-early-stop', room: '7102', reason: 'stop', via: 'meta', dst: [3], src: [6] },
      { id: 'p-early-ids', room: '7103', reason: 'length', via: 'ids', dst: [9], src: [10] },
    ];
    const landed = { dst: [] as number[], src: [] as number[] };
    for (const c of cases) {
      const dReq: KVRequestView = {
        requestId: `d-${c.id}`,
        promptTokens: 4 * c.dst.length,
        kvTransferParams: { do_remote_prefill: true, remote_host: '127.0.0.1', remote_port: port, remote_request_id: c.room },
      };
      D.scheduler.updateStateAfterAlloc(dReq, c.dst, 4 * c.dst.length);
      D.worker.startLoadKv(D.scheduler.buildConnectorMeta());
      await until(() => ((D.worker.status(dReq.requestId) ?? 0) >= 3 ? true : undefined));
      const pReq: KVRequestView = {
        requestId: c.id,
        promptTokens: 4 * c.src.length,
        kvTransferParams: { do_remote_decode: true, remote_request_id: c.room },
        finishReason: c.reason,
      };
      P.scheduler.updateStateAfterAlloc(pReq, c.src, 0);
      P.worker.startLoadKv(P.scheduler.buildConnectorMeta());
      for (let l = 0; l < LAYERS; l++) P.worker.saveKvLayer(`model.layers.${l}.self_attn`);
      await P.worker.waitForSave();
      // The send completed (the decode has the KV) and settled on the prefill worker ...
      await until(() => (D.worker.getFinished().recving.has(dReq.requestId) ? true : undefined));
      await until(() => (P.worker.status(c.id) === undefined ? true : undefined));
      // ... while vLLM has not called request_finished yet: nothing may be reported.
      let frees = 0;
      for (let i = 0; i < 5; i++, await sleep(20)) if (P.worker.getFinished().sending.has(c.id)) frees++;
      assert.is(frees, 0, `${c.id}: finished_sending before request_finished (the later delay_free=true would leak the blocks)`);
      const [delay, params] = P.scheduler.requestFinished(pReq, c.src);
      if (!delay) frees++;
      if (c.reason === 'length') assert.is(params?.remote_request_id, c.room);
      const meta = P.scheduler.buildConnectorMeta();
      assert.equal(meta.sends, [], 'no second send');
      if (c.via === 'meta') {
        P.worker.startLoadKv(meta);
        for (let i = 0; i < 3; i++) if (P.worker.getFinished().sending.has(c.id)) frees++;
      } else {
        P.worker.startLoadKv({ loads: [], sends: [] }); // the step's metadata lost: vLLM's finished_req_ids still release it
        for (let i = 0; i < 3; i++) if (P.worker.getFinished(new Set([c.id, 'unrelated'])).sending.has(c.id)) frees++;
      }
      assert.is(frees, 1, `${c.id}: the blocks must be freed exactly once (delay_free=${delay})`);
      landed.dst.push(...c.dst);
      landed.src.push(...c.src);
      checkBlocks(D.views, landed.dst, landed.src);
    }
  });
});

test('layerwise: a request that finishes before its queued send reached a worker frees its blocks at once', () => {
  const s = new KVConnectorScheduler({ role: 'prefill', bootstrapHost: 'h', bootstrapPort: 1, layerwise: true });
  const req: KVRequestView = { requestId: 'r', promptTokens: 4, kvTransferParams: { do_remote_decode: true }, finishReason: 'abort' };
  s.updateStateAfterAlloc(req, [1], 0);
  assert.equal(s.requestFinished(req, [1]), [false, null]);
  assert.equal(s.buildConnectorMeta(), { loads: [], sends: [] }, 'the send never starts');
});

test('requestFinished hands off only a length-capped prefill request', () => {
  const s = new KVConnectorScheduler({ role: 'prefill', bootstrapHost: 'h', bootstrapPort: 1 });
  assert.equal(s.requestFinished({ requestId: 'a', promptTokens: 1, kvTransferParams: { do_remote_decode: true }, finishReason: 'stop' }, [1]), [false, null]);
  assert.equal(s.requestFinished({ requestId: 'b', promptTokens: 1, finishReason: 'length' }, [1]), [false, null]);
  assert.throws(() => new KVConnectorScheduler({ role: 'prefill' }), /bootstrapHost/);
});

test.run();
