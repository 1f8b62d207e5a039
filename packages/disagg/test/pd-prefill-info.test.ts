import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KVStatus, TransferError, createTransferEngine, type ParallelLayout, type TransferErrorCode } from '@te/connector';
import { createKVManager } from '../src/index.js';
import { allocateRank, type ModelSpec } from './fixtures/pd-model.js';
import { layout, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * A decode plans its targets from the layout a bootstrap server answers: a layout it
 * cannot serve, or a malformed answer (the server is a peer), fails the room with a typed
 * error from init(), never a RangeError or a division by zero.
 */
const MODEL: ModelSpec = { attention: 'mla', totalLayers: 2, heads: 1, headBytes: 16, pageSize: 4, pages: 8, auxSlots: 2, auxBytes: 16 };
const GOOD = { attn_tp_size: 2, dp_size: 2, pp_size: 1, page_size: 4, kv_cache_dtype: 'fp16', attention: 'mla', num_layers: 2 };

const cases: { name: string; answer: unknown; layout: ParallelLayout; prefillDpRank?: number; code: TransferErrorCode; message: RegExp }[] = [
  { name: 'dp_size 0', answer: { ...GOOD, dp_size: 0 }, layout: layout(2, 0), code: 'INVALID_ARGUMENT', message: /malformed prefill layout: \/dp_size/ },
  { name: 'a fractional tp size', answer: { ...GOOD, attn_tp_size: 1.5 }, layout: layout(2, 0), code: 'INVALID_ARGUMENT', message: /\/attn_tp_size/ },
  { name: 'a string for pp_size', answer: { ...GOOD, pp_size: '1' }, layout: layout(2, 0), code: 'INVALID_ARGUMENT', message: /\/pp_size/ },
  { name: 'no object at all', answer: 'OK', layout: layout(2, 0), code: 'INVALID_ARGUMENT', message: /malformed prefill layout/ },
  { name: 'decode TP 3 against prefill TP 2', answer: GOOD, layout: layout(3, 0), code: 'LAYOUT_MISMATCH', message: /not a multiple of 2/ },
  {
    name: 'a prefill DP rank past dp_size',
    answer: GOOD,
    layout: layout(2, 0),
    prefillDpRank: 2,
    code: 'LAYOUT_MISMATCH',
    message: /prefill DP rank 2 is outside \[0, 2\)/,
  },
];

for (const c of cases) {
  test(`a bootstrap server answering ${c.name}: init fails the room with ${c.code}`, async () => {
    const server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(c.answer));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    const engine = await createTransferEngine(TCP_CONFIG);
    try {
      const memory = await allocateRank(engine, MODEL, c.layout);
      const manager = await createKVManager({ role: 'decode', layout: c.layout, buffers: memory.buffers, engine, timeouts: FAST });
      try {
        const receiver = manager.createReceiver({
          host: '127.0.0.1',
          port,
          room: 4n,
          ...(c.prefillDpRank !== undefined ? { prefillDpRank: c.prefillDpRank } : {}),
        });
        const e = await receiver.init(Uint32Array.of(0, 1), 0).then(
          () => undefined,
          (x: unknown) => x,
        );
        assert.ok(e instanceof TransferError, `init rejected with ${String(e)}`);
        assert.is(e.code, c.code, e.message);
        assert.match(e.message, c.message);
        assert.is(receiver.status, KVStatus.Failed);
        assert.is(receiver.failure?.code, c.code);
      } finally {
        await manager.close();
      }
    } finally {
      await engine.close();
      server.closeAllConnections();
      server.close();
    }
  });
}

test.run();
