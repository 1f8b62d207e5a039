import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KVStatus, createTransferEngine, loadConfig } from '@te/connector';
import { fillPrefill, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { withInProcessRanks } from './in-process-ranks.js';
import { layout } from './pd-harness.js';
import { FAST, runScenario } from './pd-scenario.js';

/*
 * The runtime knows no transport: the same head-slicing layout runs over mooncake-rdma
 * and barex (libfabric RMA over tcp;ofi_rxm, ranks in their own processes) and over a
 * third-party plugin loaded by modulePath.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 4, heads: 8, headBytes: 16, pageSize: 4, pages: 24, auxSlots: 8, auxBytes: 64 };
const ROOM = { room: 0x55aa_55aa_55aan, srcPages: [2, 3, 4, 9, 10, 17], dstPages: [5, 6, 7, 8, 1, 20], auxSrc: 1, auxDst: 6 };
const tps = (n: number) => Array.from({ length: n }, (_, i) => layout(n, i));

/*
 * Six rank processes, each with a polling rail thread, on a small loaded machine: the first
 * hello to a decode was measured answering after up to ~3.2 s, control replies after more
 * than 600 ms, and two 300 ms heartbeats in a row went unanswered. The connect deadline is
 * the transfer's own (it bounds the write anyway) and heartbeats are 1 s (2 s per control
 * request); a failure still ends as a typed status on both sides well within the test.
 */
const LOADED = { ...FAST, heartbeatMs: 1_000 };

test('TP 2→4 with head slicing over mooncake-rdma (tcp;ofi_rxm): gathered in prefill staging, written as whole pages', async () => {
  const options = { provider: 'tcp;ofi_rxm', connectTimeoutMs: LOADED.transferMs };
  const stats = await runScenario({
    model: MODEL,
    prefill: tps(2),
    decode: tps(4),
    rooms: [ROOM],
    timeouts: LOADED,
    config: { connector: 'mooncake-rdma', bindAddress: '127.0.0.1', transportOptions: { 'mooncake-rdma': options } },
  });
  assert.ok(
    stats.prefill.every((x) => x !== null && x.gatherWrites > 0 && Object.keys(x.fallbacks).length === 0),
    JSON.stringify(stats.prefill),
  );
});

for (const plugin of ['mooncake-rdma', 'barex']) {
  test(`TP 4→2 with head slicing over ${plugin} (tcp;ofi_rxm)`, async () => {
    const options: Record<string, unknown> = { provider: 'tcp;ofi_rxm', connectTimeoutMs: LOADED.transferMs };
    if (plugin === 'barex') options.poolSize = 16 << 20;
    // barex allocates staging from its 16 MiB pool like any memory: staging sized to fit it.
    const small = { prefillStaging: { bytes: 4 << 20 }, decodeStaging: { ringBytes: 4 << 20 } };
    const stats = await runScenario({
      model: MODEL,
      prefill: tps(4),
      decode: tps(2),
      rooms: [ROOM],
      timeouts: LOADED,
      ...small,
      config: { connector: plugin, bindAddress: '127.0.0.1', transportOptions: { [plugin]: options } },
    });
    // Interleaved head slices: staged on each decode's ring and scattered there, none row by row.
    assert.ok(
      stats.prefill.every((x) => x !== null && x.ringWrites > 0 && Object.keys(x.fallbacks).length === 0),
      JSON.stringify(stats.prefill),
    );
  });
}

test('TP 2→1 with head slicing over a third-party plugin loaded by modulePath (in-process transport, one engine per rank)', async () => {
  const fixture = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'test', 'fixtures', 'third-party-plugin');
  const config = loadConfig({ json: { connector: 'example-memcpy', modulePath: fixture }, env: {} });
  await withInProcessRanks({ model: MODEL, engine: () => createTransferEngine(config) }, async (make, port) => {
    const p0 = await make('prefill', layout(2, 0));
    const p1 = await make('prefill', layout(2, 1));
    const d = await make('decode', layout(1, 0));
    const bootstrap = { host: '127.0.0.1', port, room: ROOM.room };
    const receiver = d.manager.createReceiver(bootstrap);
    const senders = [p0, p1].map((p) => {
      fillPrefill(MODEL, p.memory, ROOM.room, Uint32Array.from(ROOM.srcPages), ROOM.auxSrc);
      const s = p.manager.createSender(bootstrap);
      s.init(ROOM.srcPages.length, ROOM.auxSrc);
      return s;
    });
    await receiver.init(Uint32Array.from(ROOM.dstPages), ROOM.auxDst);
    await Promise.all(senders.map((s) => s.send(Uint32Array.from(ROOM.srcPages), { last: true })));
    await receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 });
    assert.is(verifyDecode(MODEL, d.memory, [{ room: ROOM.room, pages: Uint32Array.from(ROOM.dstPages), auxSlot: ROOM.auxDst }]), undefined);
    assert.equal(
      [p0, p1, d].map((r) => r.engine.transports),
      [['example-memcpy'], ['example-memcpy'], ['example-memcpy']],
    );
  });
});

test.run();
