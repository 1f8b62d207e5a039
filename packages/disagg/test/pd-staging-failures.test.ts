import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, createTransferEngine, isTransferError, type KVReceiver, type KVSender } from '@te/connector';
import { PD_PROTOCOL_VERSION, createKVManager, type RingStats } from '../src/index.js';
import { allocateRank, fillPrefill, SENTINEL, type ModelSpec } from './fixtures/pd-model.js';
import { gatedPlugin } from './gated-transport.js';
import { withInProcessRanks } from './in-process-ranks.js';
import { layout } from './pd-harness.js';

/*
 * The staging ring's failure rules, with ranks in one process over the testkit's fake
 * transport (real engines and control plane) and a gate that holds chosen writes: a room
 * aborted while its staged bytes are on their way to the ring leaves the decode's pages
 * untouched and gives its ring space back; the decode refuses a scatter it cannot trust;
 * a ring that cannot hold one page is refused when the buffers are registered.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const gated = gatedPlugin('staging-gate');
const engine = () => createTransferEngine({ connector: 'staging-gate' }, { registry: gated.registry() });
const PAGES = Uint32Array.of(0, 1, 2, 3);
const DEST = Uint32Array.of(8, 9, 10, 11);
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: unknown) => (isTransferError(e) ? e.code : String(e)),
  );

test.after.each(() => gated.reset());

test("a decode aborts while both prefill ranks' staged chunks are on their way to its ring: its pages stay untouched, the abort resolves once the writes settled, the ring space comes back", async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    const bootstrap = { host: '127.0.0.1', port, room: 71n };
    const prefills = [await make('prefill', layout(2, 0)), await make('prefill', layout(2, 1))];
    const decode = await make('decode', layout(1, 0));
    const senders: KVSender[] = prefills.map((p) => {
      fillPrefill(MODEL, p.memory, bootstrap.room, PAGES, 1);
      const s = p.manager.createSender(bootstrap);
      s.init(PAGES.length, 1);
      return s;
    });
    const receiver: KVReceiver = decode.manager.createReceiver(bootstrap);
    await receiver.init(DEST, 2);
    await Promise.all(senders.map((s) => s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 })));
    const parked = gated.arm({ hold: decode.engine.segmentName });
    const sent = senders.map((s) => codeOf(s.send(PAGES, { last: true })));
    await parked;
    let aborted = false;
    const abort = receiver.abort('test abort').then(() => (aborted = true));
    await new Promise((r) => setTimeout(r, 300));
    assert.is(aborted, false, 'the abort was acknowledged while a staged write was still on its way');
    gated.releaseAll();
    await abort;
    assert.equal(await Promise.all(sent), ['ABORTED', 'ABORTED']);
    for (const view of decode.memory.kv)
      assert.ok(
        view.every((b) => b === SENTINEL),
        'a byte landed in the decode pages of an aborted room',
      );
    const ring = decode.manager.stagingStats() as RingStats;
    assert.ok(ring && ring.capacity > 0, 'the decode made its ring');
    assert.is(ring.used, 0, 'the aborted room gave its ring space back');
    assert.is(ring.scatteredBytes, 0);
  });
});

test('a scatter the decode cannot trust is refused before any byte moves: a room not in flight, ring space the room was not given', async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    const bootstrap = { host: '127.0.0.1', port, room: 72n };
    const p0 = await make('prefill', layout(2, 0));
    await make('prefill', layout(2, 1));
    const decode = await make('decode', layout(1, 0));
    const receiver = decode.manager.createReceiver(bootstrap);
    await receiver.init(DEST, 2);
    const client = p0.engine.controlClient(decode.engine.segmentName);
    // One piece: 4 tokens × the 2 heads prefill rank 0 holds × 16 B.
    const scatter = (room: bigint, offset: number) => ({
      v: PD_PROTOCOL_VERSION,
      room,
      prefillTpRank: 0,
      prefillPpRank: 0,
      offset,
      bytes: 128,
      firstPage: 0,
      pageCount: 1,
      dstBuffers: Uint32Array.of(0),
      firstPiece: 0,
      pieces: 1,
    });
    assert.is(await codeOf(client.request('te.kv.d.scatter', scatter(999n, 0), 2000)), 'ABORTED');
    assert.is(await codeOf(client.request('te.kv.d.scatter', scatter(72n, 0), 2000)), 'ADDRESS_OUT_OF_RANGE');
    const alloc = (await client.request('te.kv.d.ringAlloc', { v: PD_PROTOCOL_VERSION, room: 72n, prefillTpRank: 0, prefillPpRank: 0, bytes: 256 }, 2000)) as {
      offset: number;
    };
    // The room's own space, but pieces that do not make up the bytes sent.
    assert.is(await codeOf(client.request('te.kv.d.scatter', { ...scatter(72n, alloc.offset), pieces: 2 }, 2000)), 'INVALID_ARGUMENT');
    assert.is(await codeOf(client.request('te.kv.d.scatter', { ...scatter(72n, alloc.offset), dstBuffers: Uint32Array.of(99) }, 2000)), 'INVALID_ARGUMENT');
    assert.is(await codeOf(client.request('te.kv.d.scatter', scatter(72n, alloc.offset), 2000)), 'resolved');
    for (const view of decode.memory.kv.slice(1))
      assert.ok(
        view.every((b) => b === SENTINEL),
        'only the scattered buffer changed',
      );
    await receiver.abort('done');
  });
});

test('a staging ring too small for one page of KV is refused when the buffers are registered, naming both sizes', async () => {
  const e = await engine();
  try {
    const memory = await allocateRank(e, MODEL, layout(1, 0));
    const error = await createKVManager({ role: 'decode', layout: layout(1, 0), buffers: memory.buffers, engine: e, staging: { ringBytes: 4096 } }).then(
      () => undefined,
      (x: unknown) => x,
    );
    // One page of every KV buffer: 4 buffers × 4 tokens × 4 heads × 16 B = 1 KiB fits; make the page larger.
    assert.is(error, undefined, 'a ring of 4 KiB holds a 1 KiB page');
    const big = await allocateRank(e, { ...MODEL, pageSize: 64 }, layout(1, 0));
    const refused = await createKVManager({ role: 'decode', layout: layout(1, 0), buffers: big.buffers, engine: e, staging: { ringBytes: 4096 } }).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(refused, 'INVALID_ARGUMENT'), String(refused));
    assert.match((refused as Error).message, /staging ring of 4096 bytes is smaller than one page of this rank's KV \(16384 bytes/);
  } finally {
    await e.close();
  }
});

test.run();
