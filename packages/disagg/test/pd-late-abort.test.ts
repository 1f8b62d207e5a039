import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, createTransferEngine, type ParallelLayout, type TransferEngine } from '@te/connector';
import { createKVManager, PD_MESSAGES, type DisaggKVManager } from '../src/index.js';
import { allocateRank, fillPrefill, type ModelSpec } from './fixtures/pd-model.js';
import { freePort, layout, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * Once every write of a room landed and its Success report is on its way, the decode may
 * record Success at any moment. An abort on the prefill, or a decode that misses heartbeats
 * meanwhile, must not fail the room there: the two sides would end apart (the decode
 * serving KV for a request the prefill counts as failed). The reports decide: Success on
 * both sides, or PEER_FAILED when one cannot be delivered. Ranks in this process over
 * mooncake-tcp; the decode's answer to the report is held until the test lets it go.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function withPair(
  body: (
    p: { engine: TransferEngine; manager: DisaggKVManager; memory: Awaited<ReturnType<typeof allocateRank>> },
    d: { engine: TransferEngine; manager: DisaggKVManager },
    port: number,
  ) => Promise<void>,
) {
  const port = await freePort();
  const made: { engine: TransferEngine; manager: DisaggKVManager }[] = [];
  const make = async (role: 'prefill' | 'decode', l: ParallelLayout) => {
    const engine = await createTransferEngine(TCP_CONFIG);
    const memory = await allocateRank(engine, MODEL, l);
    const manager = await createKVManager({
      role,
      layout: l,
      buffers: memory.buffers,
      engine,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      timeouts: FAST,
    });
    made.push({ engine, manager });
    return { engine, manager, memory };
  };
  try {
    await body(await make('prefill', layout(1, 0)), await make('decode', layout(1, 0)), port);
  } finally {
    for (const r of made) await r.manager.close();
    for (const r of made) await r.engine.close();
  }
}

test('abort() on the prefill while its Success report is on its way: both sides end in Success', async () => {
  await withPair(async (p, d, port) => {
    // The decode takes the report and answers it only when released (a busy decode).
    const handlers = (d.engine.control as unknown as { handlers: Map<string, (body: unknown) => unknown> }).handlers;
    const original = handlers.get(PD_MESSAGES.status)!;
    let arrived!: () => void;
    const reached = new Promise<void>((r) => (arrived = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    handlers.set(PD_MESSAGES.status, async (body) => {
      const answer = original(body);
      arrived();
      await released;
      return answer;
    });
    const room = 91n;
    const pages = Uint32Array.of(0, 1, 2);
    fillPrefill(MODEL, p.memory, room, pages, 1);
    const sender = p.manager.createSender({ host: '127.0.0.1', port, room });
    sender.init(pages.length, 1);
    const receiver = d.manager.createReceiver({ host: '127.0.0.1', port, room });
    await receiver.init(Uint32Array.of(5, 6, 7), 2);
    const sending = sender.send(pages, { last: true }).catch((e: Error) => e);
    await reached;
    // (With checksums on, the decode checks aux and state before it records Success.)
    await receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 });
    assert.is(receiver.status, KVStatus.Success, 'the decode recorded Success');
    const aborting = sender.abort('the client went away');
    await sleep(50);
    release();
    await aborting;
    await sending;
    assert.is(sender.status, KVStatus.Success, `prefill: ${sender.failure?.code}: ${sender.failure?.message}`);
    assert.is(receiver.status, KVStatus.Success);
  });
});

test('abort() on the prefill after its last write settled but before it reported: no Success reaches the decode', async () => {
  await withPair(async (p, d, port) => {
    const room = 92n;
    const pages = Uint32Array.of(0, 1);
    fillPrefill(MODEL, p.memory, room, pages, 1);
    const sender = p.manager.createSender({ host: '127.0.0.1', port, room });
    sender.init(pages.length, 1);
    const receiver = d.manager.createReceiver({ host: '127.0.0.1', port, room });
    await receiver.init(Uint32Array.of(5, 6), 2);
    // Abort in the same turn as the send: its writes may settle, its report must not go out.
    const sending = sender.send(pages, { last: true }).catch((e: Error) => e);
    const aborting = sender.abort();
    await Promise.all([sending, aborting]);
    await receiver.cell.reached(KVStatus.Success, { timeoutMs: 5_000 }).catch(() => undefined);
    assert.is(sender.status, KVStatus.Failed);
    assert.is(receiver.status, KVStatus.Failed, 'the decode must not show Success for a room the prefill failed');
  });
});

test.run();
