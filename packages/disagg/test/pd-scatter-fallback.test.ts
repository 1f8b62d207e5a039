import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  KVStatus,
  NATIVE_STATUS,
  PLUGIN_API_VERSION,
  PluginRegistry,
  createTransferEngine,
  definePlugin,
  type BatchResult,
  type SubmitOptions,
  type TransferBatch,
  type TransportContext,
  type TransportPeer,
} from '@te/connector';
import { FakeFaults, FakeTransport } from '@te/testkit';
import type { StagingStats } from '../src/index.js';
import { fillPrefill, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { withInProcessRanks } from './in-process-ranks.js';
import { layout } from './pd-harness.js';

/*
 * A decode whose transport declares scattered writes but refuses them as unsupported before
 * sending a byte (what mooncake-tcp does to a target of an earlier build, whose HELLO lacks
 * the WRITE_ROWS feature): the prefill sends that write again through the decode's ring,
 * the room succeeds byte-exact, and later rooms to that decode take the ring at once.
 * The ranks run in one process over the testkit's fake transport (a test tool), extended
 * here to refuse every request with remote rows as that initiator would.
 */
const NAME = 'rowless-fabric';
// Slices of 4 KiB per page (16 tokens × 2 heads × 128 bytes): large enough for scattered writes.
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 128, pageSize: 16, pages: 16, auxSlots: 4, auxBytes: 32 };
const PAGES = Uint32Array.of(0, 1, 2, 3);
const DEST = [Uint32Array.of(8, 9, 10, 11), Uint32Array.of(3, 4, 5, 6)];
let refusedRequests = 0;

class RowlessTransport extends FakeTransport {
  override submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    const rows = batch.remoteRows;
    if (!rows || !rows.some((r) => r > 1)) return super.submit(peer, batch, options);
    if (!rows.every((r) => r > 1)) return Promise.reject(new Error('test transport: a batch mixing scattered and plain writes'));
    refusedRequests += rows.length;
    return Promise.resolve({ statuses: new Int32Array(rows.length).fill(NATIVE_STATUS.UNSUPPORTED_OPERATION), bytes: 0n });
  }
}

function registry(): PluginRegistry {
  const faults = new FakeFaults();
  const plugin = definePlugin({
    apiVersion: PLUGIN_API_VERSION,
    name: NAME,
    version: '0.0.0-test',
    capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: true, maxInFlight: 1024, rawAddresses: false, scatterWrites: true },
    options: {},
    probe: () => ({ available: true, details: {} }),
    create: async (context: TransportContext) => new RowlessTransport(NAME, context, faults),
  });
  const r = new PluginRegistry({ builtins: false });
  r.register(NAME, plugin);
  return r;
}

test('a decode whose transport refuses scattered writes unsent: the write goes through its ring, the room succeeds byte-exact, later rooms take the ring at once', async () => {
  const engine = () => createTransferEngine({ connector: NAME }, { registry: registry() });
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    const prefills = [await make('prefill', layout(2, 0)), await make('prefill', layout(2, 1))];
    const decode = await make('decode', layout(1, 0));
    const rooms = [81n, 82n];
    for (const [k, room] of rooms.entries()) {
      const bootstrap = { host: '127.0.0.1', port, room };
      const senders = prefills.map((p) => {
        fillPrefill(MODEL, p.memory, room, PAGES, 1);
        const s = p.manager.createSender(bootstrap);
        s.init(PAGES.length, 1);
        return s;
      });
      const receiver = decode.manager.createReceiver(bootstrap);
      await receiver.init(DEST[k]!, 2);
      await Promise.all(senders.map((s) => s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 })));
      await Promise.all(senders.map((s) => s.send(PAGES, { last: true })));
      await receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 });
      if (k === 0) assert.ok(refusedRequests > 0, 'the first room tried scattered writes');
    }
    const done = rooms.map((room, k) => ({ room, pages: DEST[k]!, auxSlot: 2 }));
    assert.is(verifyDecode(MODEL, decode.memory, done), undefined, 'every byte of both rooms landed');
    const stats = prefills.map((p) => p.manager.stagingStats() as StagingStats);
    for (const s of stats) {
      assert.is(s.scatterRefusals, 1, `one refusal per prefill rank, then the ring at once: ${JSON.stringify(s)}`);
      assert.is(s.transportScatters, 0);
      assert.ok(s.ringWrites >= rooms.length, `both rooms went through the ring: ${JSON.stringify(s)}`);
    }
  });
});

test.run();
