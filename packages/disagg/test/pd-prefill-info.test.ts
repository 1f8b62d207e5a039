import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type ServerResponse } from 'node:http';
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

/** A body of 2 GiB, streamed: before the bound, the decode read it all into memory (3.4 GB RSS) and timed out. */
function endless(res: ServerResponse): void {
  const chunk = Buffer.alloc(1 << 20, 0x61);
  let sent = 0;
  const more = (): void => {
    while (sent < 2048 && res.write(chunk)) sent++;
    if (sent < 2048) res.once('drain', more);
    else res.end();
  };
  more();
}

// The layout answered well, the endpoint query badly. Before, a malformed endpoint failed
// later, naming neither the server nor the field.
const endpointCases: { name: string; answer: (res: ServerResponse) => void; code: TransferErrorCode; message: RegExp }[] = [
  { name: 'no endpoint', answer: (res) => res.end('{}'), code: 'INVALID_ARGUMENT', message: /answered a malformed endpoint for dp=0 tp=0 pp=0: \/endpoint/ },
  {
    name: 'an endpoint that is a number',
    answer: (res) => res.end('{"endpoint":5,"first_layer":0,"stage_layers":2}'),
    code: 'INVALID_ARGUMENT',
    message: /malformed endpoint .*\/endpoint Expected string/,
  },
  {
    name: 'a negative first layer',
    answer: (res) => res.end('{"endpoint":"127.0.0.1:1","first_layer":-1,"stage_layers":2}'),
    code: 'INVALID_ARGUMENT',
    message: /malformed endpoint .*\/first_layer/,
  },
  { name: 'text', answer: (res) => res.end('hello'), code: 'INVALID_ARGUMENT', message: /malformed endpoint .*\(body\) Expected object/ },
  { name: '2 GiB', answer: endless, code: 'PROTOCOL_MISMATCH', message: /answered more than 1048576 bytes/ },
];

const all = [
  ...cases.map((c) => ({ ...c, layoutAnswer: c.answer, endpointAnswer: undefined as ((res: ServerResponse) => void) | undefined })),
  ...endpointCases.map((c) => ({
    name: `a good layout and, for the endpoint, ${c.name}`,
    layoutAnswer: GOOD,
    endpointAnswer: c.answer,
    layout: layout(2, 0),
    prefillDpRank: undefined,
    code: c.code,
    message: c.message,
  })),
];

for (const c of all) {
  test(`a bootstrap server answering ${c.name}: init fails the room with ${c.code}`, async () => {
    const server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (c.endpointAnswer && req.url?.includes('prefill_dp_rank')) c.endpointAnswer(res);
      else res.end(JSON.stringify(c.layoutAnswer));
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
        const started = Date.now();
        const e = await receiver.init(Uint32Array.of(0, 1), 0).then(
          () => undefined,
          (x: unknown) => x,
        );
        assert.ok(e instanceof TransferError, `init rejected with ${String(e)}`);
        assert.is(e.code, c.code, e.message);
        assert.match(e.message, c.message);
        assert.ok(Date.now() - started < 5_000, `failed after ${Date.now() - started} ms, not at once`);
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
