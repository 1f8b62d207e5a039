import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, createTransferEngine, isTransferError, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { createKVManager, type DisaggKVManager, type PDTimeouts } from '../src/index.js';
import { allocateRank, type ModelSpec } from './fixtures/pd-model.js';
import { freePort, layout, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * A decode the prefill layout cannot serve is refused when it asks (at the bootstrap
 * server, by its own planning, or by the prefill rank it registers with). The prefill's
 * room for that request can then never succeed: it must fail at once, with the decode's
 * reason, instead of holding the request's KV pages until its bootstrap timeout. Ranks run
 * in this process, each with its own mooncake-tcp engine on loopback.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const PAGES = Uint32Array.of(0, 1, 2, 3);
// Far longer than any wait below: a room that fails near it was not told of the refusal.
const TIMEOUTS: Partial<PDTimeouts> = { ...FAST, bootstrapMs: 30_000 };
// The refusal reaches the prefill within a heartbeat; the bound adds scheduling slack.
const PROMPT_MS = 3_000;

interface Rank {
  engine: TransferEngine;
  manager: DisaggKVManager;
}

async function withRanks(
  body: (
    make: (role: 'prefill' | 'decode', l: ParallelLayout, m: ModelSpec, tweak?: (b: KVBuffers) => void, timeouts?: Partial<PDTimeouts>) => Promise<Rank>,
    port: number,
  ) => Promise<void>,
): Promise<void> {
  const port = await freePort();
  const made: Rank[] = [];
  try {
    await body(async (role, l, m, tweak, timeouts = TIMEOUTS) => {
      const engine = await createTransferEngine(TCP_CONFIG);
      try {
        const memory = await allocateRank(engine, m, l);
        tweak?.(memory.buffers);
        const manager = await createKVManager({ role, layout: l, buffers: memory.buffers, engine, bootstrapHost: '127.0.0.1', bootstrapPort: port, timeouts });
        made.push({ engine, manager });
        return { engine, manager };
      } catch (e) {
        await engine.close();
        throw e;
      }
    }, port);
  } finally {
    for (const r of made) await r.manager.close();
    for (const r of made) await r.engine.close();
  }
}

/** How a cell ended: its error and when, or undefined on Success. */
async function ending(cell: { reached(s: KVStatus, o?: { timeoutMs?: number }): Promise<unknown> }, timeoutMs: number) {
  const started = Date.now();
  try {
    await cell.reached(KVStatus.Success, { timeoutMs });
    return undefined;
  } catch (e) {
    return { error: e as Error & { code?: string; details?: Record<string, unknown> }, ms: Date.now() - started };
  }
}

/**
 * The decode of `decodeModel` (with `tweak` on its buffers) asks for room `room` from a
 * prefill of `prefillModel` whose sender was created first; both rooms must fail with
 * LAYOUT_MISMATCH, the prefill's at once and with the decode's reason.
 */
async function refusedBothWays(o: {
  prefill: ParallelLayout[];
  decode: ParallelLayout;
  prefillModel: ModelSpec;
  decodeModel: ModelSpec;
  prefillTweak?: (b: KVBuffers) => void;
  decodeTweak?: (b: KVBuffers) => void;
  reason: RegExp;
}) {
  await withRanks(async (make, port) => {
    const prefills = [];
    for (const l of o.prefill) prefills.push(await make('prefill', l, o.prefillModel, o.prefillTweak));
    const d = await make('decode', o.decode, o.decodeModel, o.decodeTweak);
    // The prefill first: its rooms wait for the decode's destination.
    const room = 71n;
    const senders = prefills.map((p) => {
      const s = p.manager.createSender({ host: '127.0.0.1', port, room });
      s.init(PAGES.length, 1);
      return s;
    });
    const receiver = d.manager.createReceiver({ host: '127.0.0.1', port, room });
    const refused = await receiver.init(PAGES, 1).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(isTransferError(refused, 'LAYOUT_MISMATCH'), String(refused));
    assert.match(refused.message, o.reason);
    assert.is(refused.details?.room, room, "the decode's refusal names the room");
    for (const [i, s] of senders.entries()) {
      const end = await ending(s.cell, PROMPT_MS);
      assert.ok(end, `prefill rank ${i}: the room succeeded`);
      assert.ok(isTransferError(end.error, 'LAYOUT_MISMATCH'), `prefill rank ${i}: ${end.error.code}: ${end.error.message}`);
      assert.match(end.error.message, o.reason);
      assert.is(end.error.details?.room, room, `prefill rank ${i}: the failure names the room`);
      assert.not.match(end.error.message, /\?/);
    }
    // The decode ahead of the prefill: a sender created after the refusal fails at once.
    const later = 72n;
    const early = d.manager.createReceiver({ host: '127.0.0.1', port, room: later });
    assert.ok(
      isTransferError(
        await early.init(PAGES, 1).then(
          () => undefined,
          (e: unknown) => e,
        ),
        'LAYOUT_MISMATCH',
      ),
    );
    for (const [i, p] of prefills.entries()) {
      const s = p.manager.createSender({ host: '127.0.0.1', port, room: later });
      assert.is(s.status, KVStatus.Failed, `prefill rank ${i}: a sender created after the refusal is failed at once`);
      assert.is(s.failure?.code, 'LAYOUT_MISMATCH');
      assert.is(s.failure?.details?.room, later);
      assert.match(s.failure!.message, o.reason);
    }
  });
}

test('KV dtype refused at the bootstrap server: the prefill room fails at once with LAYOUT_MISMATCH naming both values', async () => {
  await refusedBothWays({
    prefill: [layout(1, 0)],
    decode: layout(1, 0),
    prefillModel: MODEL,
    decodeModel: { ...MODEL, kvCacheDtype: 'fp8' },
    reason: /decode has kv_cache_dtype=fp8, prefill has kv_cache_dtype=fp16/,
  });
});

test("totalKvHeads missing with different attention TP (refused by the decode's planning): every prefill rank of the room fails at once", async () => {
  const drop = (b: KVBuffers) => void delete b.totalKvHeads;
  await refusedBothWays({
    prefill: [layout(2, 0), layout(2, 1)],
    decode: layout(1, 0),
    prefillModel: MODEL,
    decodeModel: MODEL,
    prefillTweak: drop,
    decodeTweak: drop,
    reason: /totalKvHeads must be known/,
  });
});

test('registration refused by the prefill rank (state kind differs): the prefill room fails at once with both values', async () => {
  const withState: ModelSpec = { ...MODEL, state: { kind: 'mamba', units: 2, unitBytes: 8, slots: 2 } };
  await refusedBothWays({
    prefill: [layout(1, 0)],
    decode: layout(1, 0),
    prefillModel: MODEL,
    decodeModel: withState,
    reason: /decode has state=mamba, prefill has state=none/,
  });
});

test('a room no decode ever asked for times out naming what it waited for, with no unknown count', async () => {
  await withRanks(async (make, port) => {
    const p = await make('prefill', layout(1, 0), MODEL, undefined, { ...FAST, bootstrapMs: 400 });
    const s = p.manager.createSender({ host: '127.0.0.1', port, room: 73n });
    const end = await ending(s.cell, 5_000);
    assert.ok(end && isTransferError(end.error, 'TIMEOUT'), String(end?.error));
    assert.is(end.error.details?.room, 73n);
    assert.not.match(end.error.message, /\?/);
    assert.match(end.error.message, /no decode rank/);
  });
});

test.run();
