import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, isTransferError } from '@te/connector';
import { PD_MESSAGES, PD_PROTOCOL_VERSION } from '../src/index.js';
import { fillPrefill, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { flip, refusals } from './flipping-transport.js';
import { layout } from './pd-harness.js';
import { ending, onChunkSums, onReport, withRanks as withRanksOf, type Rank, type RanksOptions } from './checksum-ranks.js';

/*
 * KV checksums (createKVManager({ checksums: true }) on the prefill): a byte that differs
 * between what the prefill sent and what landed fails the room with DATA_CORRUPTED on both
 * sides, naming the layer and page, instead of Success. Shown with a byte flipped in flight
 * (a fake transport of this test that corrupts what it lands), and with a real mooncake-tcp
 * write corrupted after it landed, before the decode counted the report (a test hook on the
 * decode's control handler). Rooms of every shape succeed with checksums on (no false
 * positive) and their reports carry the checksums.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const MLA: ModelSpec = { attention: 'mla', totalLayers: 2, heads: 1, headBytes: 64, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };

const withRanks = (o: Partial<RanksOptions>, body: Parameters<typeof withRanksOf>[1]) => withRanksOf({ model: MODEL, ...o }, body);

async function oneRoom(
  prefills: Rank[],
  d: Rank,
  port: number,
  room: bigint,
  src: number[],
  dst: number[],
  how: 'whole' | 'chunked' | 'layerwise',
  model = MODEL,
) {
  const pages = Uint32Array.from(src);
  const senders = prefills.map((p) => {
    fillPrefill(model, p.memory, room, pages, 1);
    const s = p.manager.createSender({ host: '127.0.0.1', port, room });
    s.init(pages.length, 1);
    return s;
  });
  const receiver = d.manager.createReceiver({ host: '127.0.0.1', port, room });
  await receiver.init(Uint32Array.from(dst), 2);
  await Promise.all(
    senders.map(async (s, i) => {
      if (how === 'layerwise') {
        await s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 });
        const batch = prefills[i]!.manager.beginBatch([{ sender: s, pages }]);
        const span = prefills[i]!.memory;
        for (let l = 0; l < span.layers; l++) batch.layerReady(span.firstLayer + l);
        await batch.finish();
      } else if (how === 'chunked') {
        await s.send(pages.subarray(0, 1)).catch(() => undefined);
        await s.send(pages.subarray(1), { last: true }).catch(() => undefined);
      } else {
        await s.send(pages, { last: true }).catch(() => undefined);
      }
    }),
  );
  return { senders, receiver, errors: { decode: await ending(receiver.cell), prefill: await Promise.all(senders.map((s) => ending(s.cell))) } };
}

for (const checksums of ['pages', true] as const)
  test(`checksums ${checksums === true ? 'on (mooncake-tcp verifies the KV writes)' : "'pages'"}: whole, chunked and layerwise rooms, TP 2→2, PP 2→1 and MLA succeed byte-exact, each report carrying ${checksums === true ? 'kvVerifiedInTransfer and no KV checksums' : 'its checksums'}`, async () => {
    for (const [name, prefillLayouts, decodeLayouts, model] of [
      ['TP 2→2', [layout(2, 0), layout(2, 1)], [layout(2, 0), layout(2, 1)], MODEL],
      ['PP 2→1', [layout(1, 0, { ppSize: 2, ppRank: 0 }), layout(1, 0, { ppSize: 2, ppRank: 1 })], [layout(1, 0)], MODEL],
      ['MLA', [layout(1, 0)], [layout(1, 0)], MLA],
    ] as const) {
      await withRanks({ model, checksums }, async (make, port) => {
        const prefills: Rank[] = [];
        for (const l of prefillLayouts) prefills.push(await make('prefill', l));
        const decodes: Rank[] = [];
        for (const l of decodeLayouts) decodes.push(await make('decode', l));
        let reports = 0;
        let withSums = 0;
        for (const d of decodes)
          onReport(d, (m) => {
            reports++;
            const sums = m.kvCrc32c instanceof Uint32Array && m.kvCrc32c.length > 0;
            if (checksums === 'pages' ? sums && m.kvVerifiedInTransfer === undefined : !sums && m.kvVerifiedInTransfer === true) withSums++;
          });
        const rooms: { room: bigint; pages: Uint32Array; auxSlot: number }[] = [];
        let id = 0x5100n;
        for (const how of ['whole', 'chunked', 'layerwise'] as const) {
          const room = id++;
          const dst = [3 + rooms.length * 3, 4 + rooms.length * 3, 5 + rooms.length * 3];
          // One room at a time, on every decode rank (each its own receiver, same pages).
          const pages = Uint32Array.from([0, 1, 2]);
          const senders = prefills.map((p) => {
            fillPrefill(model, p.memory, room, pages, 1);
            const s = p.manager.createSender({ host: '127.0.0.1', port, room });
            s.init(pages.length, 1);
            return s;
          });
          const receivers = decodes.map((d) => d.manager.createReceiver({ host: '127.0.0.1', port, room }));
          await Promise.all(receivers.map((r) => r.init(Uint32Array.from(dst), 2)));
          await Promise.all(
            senders.map(async (s, i) => {
              if (how === 'layerwise') {
                await s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 });
                const batch = prefills[i]!.manager.beginBatch([{ sender: s, pages }]);
                for (let l = 0; l < prefills[i]!.memory.layers; l++) batch.layerReady(prefills[i]!.memory.firstLayer + l);
                await batch.finish();
              } else if (how === 'chunked') {
                await s.send(pages.subarray(0, 2));
                await s.send(pages.subarray(2), { last: true });
              } else await s.send(pages, { last: true });
            }),
          );
          for (const r of receivers) assert.is(await ending(r.cell), undefined, `${name} ${how}: the decode room failed`);
          rooms.push({ room, pages: Uint32Array.from(dst), auxSlot: 2 });
          for (const [k, d] of decodes.entries()) assert.is(verifyDecode(model, d.memory, rooms), undefined, `${name} ${how}: decode rank ${k} bytes`);
        }
        assert.ok(reports >= 3, `${name}: ${reports} reports`);
        assert.is(withSums, reports, `${name}: every Success report carried ${checksums === 'pages' ? 'checksums' : 'kvVerifiedInTransfer, no KV checksums'}`);
      });
    }
  });

test('a byte flipped in flight (fake transport): DATA_CORRUPTED on both sides, naming the layer and page; with checksums off the room succeeds on the bad byte', async () => {
  for (const checksums of [true, false]) {
    await withRanks({ fake: true, checksums }, async (make, port) => {
      const p = await make('prefill', layout(1, 0));
      const d = await make('decode', layout(1, 0));
      flip.at = (addr) => void (d.engine.hostView(addr, 1n)![0]! ^= 0xff);
      flip.armed = true;
      const { errors } = await oneRoom([p], d, port, 0x5200n, [0, 1], [6, 7], 'whole');
      if (!checksums) {
        assert.is(errors.decode, undefined, 'without checksums nothing notices');
        assert.ok(verifyDecode(MODEL, d.memory, [{ room: 0x5200n, pages: Uint32Array.of(6, 7), auxSlot: 2 }]), 'the flipped byte is there');
        return;
      }
      assert.ok(isTransferError(errors.decode, 'DATA_CORRUPTED'), `decode: ${String(errors.decode)}`);
      assert.match(errors.decode!.message, /layer 0 K, destination pages 6/);
      assert.is((errors.decode as { details?: Record<string, unknown> }).details?.room, 0x5200n);
      assert.ok(isTransferError(errors.prefill[0], 'DATA_CORRUPTED'), `prefill: ${String(errors.prefill[0])}`);
      assert.is((errors.prefill[0] as { details?: Record<string, unknown> }).details?.room, 0x5200n);
    });
  }
});

test('a byte flipped in flight by a transport that verifies writes (fake): the write fails, DATA_CORRUPTED on both sides naming the layer and page', async () => {
  await withRanks({ fake: 'verifying' }, async (make, port) => {
    const p = await make('prefill', layout(1, 0));
    const d = await make('decode', layout(1, 0));
    let reported = 0;
    onReport(d, (m) => void (m.status === KVStatus.Success && reported++));
    flip.at = (addr) => void (d.engine.hostView(addr, 1n)![0]! ^= 0xff);
    flip.armed = true;
    const { errors } = await oneRoom([p], d, port, 0x5250n, [0, 1], [6, 7], 'whole');
    assert.is(flip.armed, false, 'the fake transport flipped a byte');
    assert.is(reported, 0, 'no Success report went out');
    const pe = errors.prefill[0] as (Error & { details?: Record<string, unknown> }) | undefined;
    assert.ok(isTransferError(pe, 'DATA_CORRUPTED'), `prefill: ${String(pe)}`);
    assert.match(pe!.message, /transport's digests differ\) in layer 0 K, destination pages 6\b/);
    assert.is(pe!.details?.room, 0x5250n);
    const de = errors.decode as (Error & { details?: Record<string, unknown> }) | undefined;
    assert.ok(isTransferError(de, 'DATA_CORRUPTED'), `decode: ${String(de)}`);
    assert.is(de!.details?.room, 0x5250n);
  });
});

test('a decode whose transport refuses verified writes unsent (an earlier build): the write goes again with page checksums, and later rooms do not ask', async () => {
  await withRanks({ fake: 'refusing' }, async (make, port) => {
    const p = await make('prefill', layout(1, 0));
    const d = await make('decode', layout(1, 0));
    const reports: Record<string, unknown>[] = [];
    onReport(d, (m) => void (m.status === KVStatus.Success && reports.push(m)));
    refusals.count = 0;
    for (const [room, dst] of [
      [0x5260n, [6, 7]],
      [0x5261n, [8, 9]],
    ] as const) {
      const { errors } = await oneRoom([p], d, port, room, [0, 1], [...dst], 'chunked');
      assert.is(errors.decode, undefined, `room ${room}: decode: ${String(errors.decode)}`);
      assert.is(errors.prefill[0], undefined, `room ${room}: prefill: ${String(errors.prefill[0])}`);
    }
    assert.is(refusals.count, 1, 'one verified batch was refused; the rest went unverified');
    assert.is(reports.length, 2);
    for (const m of reports) {
      assert.ok(m.kvCrc32c instanceof Uint32Array && m.kvCrc32c.length > 0, 'page checksums instead');
      assert.is(m.kvVerifiedInTransfer, undefined);
    }
    assert.is(
      verifyDecode(MODEL, d.memory, [
        { room: 0x5260n, pages: Uint32Array.of(6, 7), auxSlot: 2 },
        { room: 0x5261n, pages: Uint32Array.of(8, 9), auxSlot: 2 },
      ]),
      undefined,
    );
  });
});

test("a real write corrupted after it landed (mooncake-tcp, before the decode counts the report), checksums 'pages': DATA_CORRUPTED naming layer 1 V", async () => {
  await withRanks({ checksums: 'pages' }, async (make, port) => {
    const p = await make('prefill', layout(1, 0));
    const d = await make('decode', layout(1, 0));
    const dst = [9, 10, 11];
    onReport(d, (m) => {
      if (m.status !== KVStatus.Success) return;
      // Layer 1's V buffer is the last of the 4 (K0, K1, V0, V1); flip a byte of page 10.
      const item = Number(d.memory.buffers.kv.itemLengths[3]!);
      d.memory.kv[3]![10 * item + 5]! ^= 0x01;
    });
    const { errors } = await oneRoom([p], d, port, 0x5300n, [0, 1, 2], dst, 'chunked');
    assert.ok(isTransferError(errors.decode, 'DATA_CORRUPTED'), `decode: ${String(errors.decode)}`);
    assert.match(errors.decode!.message, /layer 1 V, destination pages 10\b/);
    assert.ok(isTransferError(errors.prefill[0], 'DATA_CORRUPTED'), `prefill: ${String(errors.prefill[0])}`);
  });
});

test("checksums 'pages': a chunk is checked once the prefill reports it written: a byte flipped in it fails the room before the last chunk is sent", async () => {
  await withRanks({ checksums: 'pages' }, async (make, port) => {
    const p = await make('prefill', layout(1, 0));
    const d = await make('decode', layout(1, 0));
    const chunkSums: { firstPage: number; pages: number }[] = [];
    onChunkSums(d, (m) => {
      chunkSums.push({ firstPage: m.firstPage as number, pages: (m.kvCrc32c as Uint32Array).length / 4 });
      // The first chunk (room page 0 → destination page 5) landed; flip a byte of layer 0's K there.
      if (m.room === 0x5500n) d.memory.kv[0]![5 * Number(d.memory.buffers.kv.itemLengths[0]!) + 3]! ^= 0x10;
    });
    // A clean room first: its first chunk is checked before its Success (no false positive).
    const clean = await oneRoom([p], d, port, 0x5501n, [0, 1, 2], [9, 10, 11], 'chunked');
    assert.is(clean.errors.decode, undefined, `the clean room succeeded: ${String(clean.errors.decode)}`);
    assert.equal(chunkSums, [{ firstPage: 0, pages: 1 }], 'its first chunk was reported with its checksums');

    const pages = Uint32Array.of(0, 1, 2);
    fillPrefill(MODEL, p.memory, 0x5500n, pages, 1);
    const sender = p.manager.createSender({ host: '127.0.0.1', port, room: 0x5500n });
    sender.init(pages.length, 1);
    const receiver = d.manager.createReceiver({ host: '127.0.0.1', port, room: 0x5500n });
    await receiver.init(Uint32Array.of(5, 6, 7), 2);
    await sender.send(pages.subarray(0, 1));
    // Failed before the rest is sent: the decode checked the chunk when it was reported.
    const failed = await ending(receiver.cell);
    assert.ok(isTransferError(failed, 'DATA_CORRUPTED'), `decode: ${String(failed)}`);
    assert.match(failed!.message, /layer 0 K, destination pages 5\b/);
    assert.is((failed as { details?: Record<string, unknown> }).details?.room, 0x5500n);
    await sender.send(pages.subarray(1), { last: true }).catch(() => undefined);
    const prefillError = await ending(sender.cell);
    assert.ok(isTransferError(prefillError, 'DATA_CORRUPTED'), `prefill: ${String(prefillError)}`);
  });
});

test('chunk checksums for pages the room does not have fail it with PROTOCOL_MISMATCH', async () => {
  await withRanks({}, async (make, port) => {
    const p = await make('prefill', layout(1, 0));
    const d = await make('decode', layout(1, 0));
    const receiver = d.manager.createReceiver({ host: '127.0.0.1', port, room: 0x5600n });
    const sender = p.manager.createSender({ host: '127.0.0.1', port, room: 0x5600n });
    sender.init(2, 1);
    await receiver.init(Uint32Array.of(3, 4), 2);
    // Forged from the prefill's engine: two pages' checksums (4 layer buffers each) from room page 1 on.
    const forged = {
      v: PD_PROTOCOL_VERSION,
      room: 0x5600n,
      prefillTpRank: 0,
      prefillPpRank: 0,
      firstPage: 1,
      kvCrc32c: new Uint32Array(8),
      checksumLayers: { first: 0, count: 2 },
    };
    await p.engine.controlClient(d.engine.segmentName).request(PD_MESSAGES.sums, forged, 5_000);
    const failed = await ending(receiver.cell);
    assert.ok(isTransferError(failed, 'PROTOCOL_MISMATCH'), `decode: ${String(failed)}`);
    assert.match(failed!.message, /KV checksums for 3 prefill pages; 2 destination pages/);
    assert.is((failed as { details?: Record<string, unknown> }).details?.room, 0x5600n);
  });
});

test('a corrupted aux slot fails the room too', async () => {
  await withRanks({}, async (make, port) => {
    const p = await make('prefill', layout(1, 0));
    const d = await make('decode', layout(1, 0));
    onReport(d, (m) => {
      if (m.status === KVStatus.Success) d.memory.aux[1]![2 * MODEL.auxBytes + 3]! ^= 0x40;
    });
    const { errors } = await oneRoom([p], d, port, 0x5400n, [0], [12], 'whole');
    assert.ok(isTransferError(errors.decode, 'DATA_CORRUPTED'), `decode: ${String(errors.decode)}`);
    assert.match(errors.decode!.message, /aux buffer 1, slot 2/);
  });
});

test.run();
