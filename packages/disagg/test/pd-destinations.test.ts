import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, TransferError, createTransferEngine, isTransferError, type KVBuffers, type TransferEngine } from '@te/connector';
import { until } from '@te/testkit';
import { acceptDestination } from '../src/pd/destination.js';
import { PrefillRank } from '../src/pd/prefill-rank.js';
import { resolveTimeouts } from '../src/pd/timeouts.js';
import { MSG, PD_PROTOCOL_VERSION, type RegisterMessage } from '../src/protocol/messages.js';
import { fillPrefill, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { withInProcessRanks, type InProcessRank } from './in-process-ranks.js';
import { freePort, layout, TCP_CONFIG } from './pd-harness.js';

/*
 * A prefill rank's table of registered decode ranks, fed by peers: bounded (a decode lost
 * to the heartbeat is dropped once no room uses it, failed or idle ones are evicted at the
 * cap, in-use ones never) and every field checked before it is kept. The prefill rank runs
 * in this process on a real engine; decodes are played by a probe engine's control client
 * (no KV is written, so the buffers are only numbers).
 */
const L = layout(1, 0);
const PAGE = 256n;
const PAGES = 16n;

function group(n: number, item: bigint, count: bigint, base: bigint) {
  return {
    addrs: BigUint64Array.from({ length: n }, (_, i) => base + BigInt(i) * item * count),
    lengths: BigUint64Array.from({ length: n }, () => item * count),
    itemLengths: BigUint64Array.from({ length: n }, () => item),
  };
}

function prefillBuffers(state = false): KVBuffers {
  const b: KVBuffers = {
    kv: group(4, PAGE, PAGES, 0x10000n),
    attention: 'mha',
    numLayers: 2,
    totalLayers: 2,
    pageSize: 4,
    kvCacheDtype: 'fp16',
    aux: group(2, 64n, 8n, 0x80000n),
    device: 'cpu',
    totalKvHeads: 2,
  };
  if (state) b.state = { ...group(2, 128n, 4n, 0x90000n), kind: 'mamba' };
  return b;
}

const wire = (g: ReturnType<typeof group>) => ({ addrs: g.addrs, lengths: g.lengths, itemLens: g.itemLengths });

function registration(segment: string, over: Partial<RegisterMessage> = {}): RegisterMessage {
  return {
    v: PD_PROTOCOL_VERSION,
    decodeSegment: segment,
    epoch: 1n,
    tpSize: 1,
    tpRank: 0,
    ppSize: 1,
    ppRank: 0,
    attention: 'mha',
    pageSize: 4,
    kvCacheDtype: 'fp16',
    firstLayer: 0,
    numLayers: 2,
    totalLayers: 2,
    kv: wire(group(4, PAGE, PAGES, 0x20000n)),
    aux: wire(group(2, 64n, 8n, 0xa0000n)),
    ...over,
  };
}

function request(segment: string, room: bigint, tpRank = 0) {
  return {
    v: PD_PROTOCOL_VERSION,
    room,
    decodeSegment: segment,
    decodeTpRank: tpRank,
    pages: Uint32Array.of(1),
    auxIndex: 0,
    requiredDecodeRanks: 1,
    dummy: false,
    sendsAux: false,
    sendsState: false,
  };
}

async function errorOf(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

async function setup(timeouts: Parameters<typeof resolveTimeouts>[0], maxDestinations?: number) {
  const engine = await createTransferEngine(TCP_CONFIG);
  const probe = await createTransferEngine(TCP_CONFIG);
  const rank = new PrefillRank(engine, L, prefillBuffers(), resolveTimeouts(timeouts), undefined, maxDestinations === undefined ? {} : { maxDestinations });
  const client = probe.controlClient(engine.segmentName);
  const close = async (): Promise<void> => {
    await rank.close();
    await probe.close();
    await engine.close();
  };
  return { engine, rank, client, close };
}

test('at the cap, the least recently used idle registration is evicted, never one a room uses; all in use is POOL_EXHAUSTED', async () => {
  const { rank, client, close } = await setup({ bootstrapMs: 60_000 }, 3);
  try {
    const reg = (s: string) => client.request(MSG.register, registration(s), 5_000);
    const req = (s: string, room: bigint) => client.request(MSG.request, request(s, room), 5_000);
    await reg('127.0.0.1:10001');
    await reg('127.0.0.1:10002');
    await reg('127.0.0.1:10003');
    await req('127.0.0.1:10001', 1n); // a room waits for its sender: A is in use, and most recent
    await reg('127.0.0.1:10004'); // a decode restarted on a new port: B (oldest idle) goes
    assert.is(rank.destinationCount, 3);
    assert.ok(isTransferError(await errorOf(req('127.0.0.1:10002', 2n)), 'STALE_DESCRIPTOR'), 'the evicted decode registers again on STALE_DESCRIPTOR');
    await req('127.0.0.1:10003', 3n); // C in use
    await reg('127.0.0.1:10005'); // D (the only idle one) goes
    assert.ok(isTransferError(await errorOf(req('127.0.0.1:10004', 4n)), 'STALE_DESCRIPTOR'));
    await req('127.0.0.1:10005', 5n); // E in use: A, C, E all have rooms
    const full = await errorOf(reg('127.0.0.1:10006'));
    assert.ok(isTransferError(full, 'POOL_EXHAUSTED'), String(full));
    await reg('127.0.0.1:10001'); // registering again (a restart, same port) needs no room
    assert.is(rank.destinationCount, 3);
    // Their rooms still find their registrations.
    for (const [s, room] of [
      ['127.0.0.1:10001', 11n],
      ['127.0.0.1:10003', 13n],
      ['127.0.0.1:10005', 15n],
    ] as const)
      await req(s, room);
  } finally {
    await close();
  }
});

test('the default cap: a decode restarting on a new ephemeral port 4100 times can still register', async () => {
  const { rank, client, close } = await setup({ bootstrapMs: 60_000 });
  try {
    for (let base = 0; base < 4100; base += 100) {
      await Promise.all(Array.from({ length: 100 }, (_, i) => client.request(MSG.register, registration(`127.0.0.1:${20_000 + base + i}`), 10_000)));
    }
    assert.is(rank.destinationCount, 4096);
    await client.request(MSG.request, request('127.0.0.1:24099', 1n), 5_000);
  } finally {
    await close();
  }
});

test('a decode lost to the heartbeat: its registration is dropped once no room uses it, kept (failed) while one does', async () => {
  const { rank, client, close } = await setup({ bootstrapMs: 1_500, heartbeatMs: 100, heartbeatMaxFailures: 2, transferMs: 1_000 });
  try {
    const dead = `127.0.0.1:${await freePort()}`; // nothing listens there: pings fail
    await client.request(MSG.register, registration(dead), 5_000);
    // Another rank of the same decode process (same segment): a room waits for its sender.
    await client.request(MSG.register, registration(dead, { tpRank: 1, tpSize: 2, totalKvHeads: 2, kvHeadsPerRank: 1 }), 5_000);
    assert.is(rank.destinationCount, 2);
    await client.request(MSG.request, request(dead, 2n, 1), 5_000);
    const sender = rank.createSender({ host: '127.0.0.1', port: 1, room: 1n });
    await client.request(MSG.request, request(dead, 1n), 5_000);
    assert.is(sender.status, KVStatus.WaitingForInput);
    await until('the sender failed (its decode lost to the heartbeat)', () => sender.status === KVStatus.Failed, 10_000, 20);
    assert.is(sender.failure?.code, 'PEER_FAILED', sender.failure?.message);
    await sender.settled();
    await until('one registration left (the other rank, its room still open)', () => rank.destinationCount === 1, 10_000, 20);
    const gone = await errorOf(client.request(MSG.request, request(dead, 3n), 5_000));
    assert.ok(isTransferError(gone, 'STALE_DESCRIPTOR'), `dropped, so the decode (if it comes back) registers again: ${String(gone)}`);
    const kept = await errorOf(client.request(MSG.request, request(dead, 4n, 1), 5_000));
    assert.ok(isTransferError(kept, 'PEER_FAILED'), `still used by room 2, so kept and failed: ${String(kept)}`);
    // Room 2 expires (bootstrap timeout, swept): nothing uses it any more.
    await until('no registration left (room 2 expired)', () => rank.destinationCount === 0, 10_000, 20);
  } finally {
    await close();
  }
});

test('registration fields are checked before anything is kept: segment name, layer span, table sizes (INVALID_ARGUMENT)', async () => {
  const b = prefillBuffers();
  const bad = (m: RegisterMessage, what: string, buffers = b) => {
    try {
      acceptDestination(m, buffers, L);
    } catch (e) {
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${what}: ${String(e)}`);
      return;
    }
    assert.unreachable(`${what}: accepted`);
  };
  bad(registration('127.0.0.1:1', { tpRank: 1 }), 'tp rank 1 of 1');
  bad(registration('127.0.0.1:1', { ppRank: 1 }), 'pp rank 1 of 1');
  for (const s of ['nohost', 'a b:1', 'h:0', 'h:99999', ':1', 'h:x', 'a:b:1']) bad(registration(s), `segment ${s}`);
  bad(registration('127.0.0.1:1', { firstLayer: 1 }), 'layers [1, 3) of 2');
  bad(registration('127.0.0.1:1', { firstLayer: 2, numLayers: 1, kv: wire(group(2, PAGE, PAGES, 0x20000n)) }), 'layers [2, 3) of 2');
  bad(registration('127.0.0.1:1', { aux: wire(group(1000, 64n, 8n, 0xa0000n)) }), '1000 aux buffers');
  bad(registration('127.0.0.1:1', { aux: wire(group(1, 64n, 8n, 0xa0000n)) }), '1 aux buffer for 2');
  const withState = prefillBuffers(true);
  bad(registration('127.0.0.1:1', { state: { kind: 'mamba', table: wire(group(1000, 128n, 4n, 0xb0000n)) } }), '1000 state buffers', withState);
  // What the layout pairs is accepted.
  assert.ok(acceptDestination(registration('127.0.0.1:1'), b, L));
  assert.ok(acceptDestination(registration('[::1]:7', { aux: wire(group(0, 64n, 8n, 0n)) }), b, L));
  assert.ok(acceptDestination(registration('host-1.example:65535', { state: { kind: 'mamba', table: wire(group(2, 128n, 4n, 0xb0000n)) } }), withState, L));

  // Over the control plane the refusal is typed too, and nothing is kept.
  const { rank, client, close } = await setup({});
  try {
    const e = await errorOf(client.request(MSG.register, registration('not a segment'), 5_000));
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    const span = await errorOf(client.request(MSG.register, registration('127.0.0.1:9', { firstLayer: 5 }), 5_000));
    assert.ok(isTransferError(span, 'INVALID_ARGUMENT'), String(span));
    assert.is(rank.destinationCount, 0);
  } finally {
    await close();
  }
});

const PAIR_MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 2, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 64 };

const PAIR_RANKS = { model: PAIR_MODEL, engine: () => createTransferEngine(TCP_CONFIG) };

/** A prefill and a decode manager in this process, each on its own engine, closed afterwards. */
async function withManagers(body: (pair: { model: ModelSpec; port: number; p: InProcessRank; d: InProcessRank }) => Promise<void>): Promise<void> {
  await withInProcessRanks(PAIR_RANKS, async (make, port) => body({ model: PAIR_MODEL, port, p: await make('prefill', L), d: await make('decode', L) }));
}

/**
 * Routes `engine`'s control requests through `through`, whose `send()` makes the real request:
 * a test can delay one, or drop its answer.
 */
function interceptControl(
  engine: TransferEngine,
  through: (r: { segment: string; type: string; timeoutMs: number; send: () => Promise<unknown> }) => Promise<unknown>,
): void {
  const controlClient = engine.controlClient.bind(engine);
  engine.controlClient = ((segment: string) => {
    const c = controlClient(segment);
    const w = Object.create(c) as typeof c;
    w.request = ((type: string, body: unknown, timeoutMs: number) =>
      through({ segment, type, timeoutMs, send: () => c.request(type, body, timeoutMs) })) as typeof c.request;
    return w;
  }) as TransferEngine['controlClient'];
}

/** What a request whose answer never came rejects with. */
const noAnswer = (r: { segment: string; type: string; timeoutMs: number }) =>
  new TransferError('TIMEOUT', `No answer from ${r.segment} to "${r.type}" within ${r.timeoutMs} ms`);

test('a transient connection failure fails that room on both sides; the live decode registers again and its next room succeeds', async () => {
  await withManagers(async ({ model, port, p, d }) => {
    // The first write to the decode fails as a connect that got no answer in time would.
    const transfer = p.engine.transfer.bind(p.engine);
    let failNext = true;
    p.engine.transfer = (async (...args: Parameters<TransferEngine['transfer']>) => {
      if (!failNext) return transfer(...args);
      failNext = false;
      throw new TransferError('PEER_UNREACHABLE', `no answer from "${args[0]}" within 2000 ms`);
    }) as TransferEngine['transfer'];
    const room = async (id: bigint, src: number[], dst: number[], aux: number) => {
      const bootstrap = { host: '127.0.0.1', port, room: id };
      const receiver = d.manager.createReceiver(bootstrap);
      fillPrefill(model, p.memory, id, Uint32Array.from(src), aux);
      const sender = p.manager.createSender(bootstrap);
      sender.init(src.length, aux);
      const received = receiver.init(Uint32Array.from(dst), aux).then(() => receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 }));
      const sent = sender.send(Uint32Array.from(src), { last: true }).then(() => sender.cell.reached(KVStatus.Success, { timeoutMs: 10_000 }));
      await Promise.allSettled([received, sent]);
      return { receiver, sender };
    };
    const first = await room(1n, [0, 1], [2, 3], 0);
    assert.is(first.sender.status, KVStatus.Failed);
    assert.is(first.sender.failure?.code, 'PEER_UNREACHABLE', first.sender.failure?.message);
    assert.is(first.receiver.status, KVStatus.Failed, 'the decode hears the failure');
    assert.is(first.receiver.failure?.code, 'PEER_UNREACHABLE', first.receiver.failure?.message);
    // The decode is alive and asks again: the prefill's failure mark must not refuse it for good.
    const second = await room(2n, [4, 5], [6, 7], 1);
    assert.is(second.receiver.status, KVStatus.Success, `${second.receiver.failure?.code}: ${second.receiver.failure?.message}`);
    assert.is(second.sender.status, KVStatus.Success, `${second.sender.failure?.code}: ${second.sender.failure?.message}`);
    assert.is(verifyDecode(model, d.memory, [{ room: 2n, pages: Uint32Array.of(6, 7), auxSlot: 1 }], [2, 3]), undefined);
  });
});

test('a request the decode gave up on (its answer came too late) is aborted on the prefill: no write, no Success there', async () => {
  await withManagers(async ({ model, port, p, d }) => {
    // The prefill accepts the request, but its answer reaches the decode after the deadline.
    let abortAcked!: () => void;
    const acked = new Promise<void>((r) => (abortAcked = r));
    interceptControl(d.engine, async (r) => {
      const reply = await r.send();
      if (r.type === MSG.request) throw noAnswer(r);
      if (r.type === MSG.abort) abortAcked();
      return reply;
    });
    const bootstrap = { host: '127.0.0.1', port, room: 7n };
    const receiver = d.manager.createReceiver(bootstrap);
    const refused = await errorOf(receiver.init(Uint32Array.of(2, 3), 1));
    assert.ok(isTransferError(refused, 'TIMEOUT'), String(refused));
    assert.is(receiver.status, KVStatus.Failed);
    // The decode's abort is bounded; without it the prefill would go on as below.
    await Promise.race([acked, new Promise((r) => setTimeout(r, 3_000))]);
    fillPrefill(model, p.memory, 7n, Uint32Array.of(0, 1), 0);
    const sender = p.manager.createSender(bootstrap);
    sender.init(2, 0);
    await sender.send(Uint32Array.of(0, 1), { last: true }).catch(() => undefined);
    await sender.cell.reached(KVStatus.Failed, { timeoutMs: 10_000 }).catch(() => undefined);
    assert.is(sender.status, KVStatus.Failed, 'the prefill heard that the decode failed the room');
    assert.is(sender.failure?.code, 'ABORTED', sender.failure?.message);
    assert.is(verifyDecode(model, d.memory, []), undefined, 'nothing landed in the failed room');
  });
});

test('a Success report whose answer is lost is sent again: prefill and decode both end in Success', async () => {
  await withManagers(async ({ model, port, p, d }) => {
    // The decode receives the first report and answers it; the answer never reaches the prefill.
    let reports = 0;
    interceptControl(p.engine, async (r) => {
      const reply = await r.send();
      if (r.type === MSG.status && ++reports === 1) throw noAnswer(r);
      return reply;
    });
    const bootstrap = { host: '127.0.0.1', port, room: 9n };
    const receiver = d.manager.createReceiver(bootstrap);
    fillPrefill(model, p.memory, 9n, Uint32Array.of(0, 1), 0);
    const sender = p.manager.createSender(bootstrap);
    sender.init(2, 0);
    const received = receiver.init(Uint32Array.of(2, 3), 0).then(() => receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 }));
    const sent = sender.send(Uint32Array.of(0, 1), { last: true }).then(() => sender.cell.reached(KVStatus.Success, { timeoutMs: 10_000 }));
    await Promise.allSettled([received, sent]);
    assert.is(receiver.status, KVStatus.Success, `${receiver.failure?.code}: ${receiver.failure?.message}`);
    assert.is(sender.status, KVStatus.Success, `the prefill agrees: ${sender.failure?.code}: ${sender.failure?.message}`);
    assert.is(reports, 2, 'the report was sent twice');
    assert.is(verifyDecode(model, d.memory, [{ room: 9n, pages: Uint32Array.of(2, 3), auxSlot: 0 }]), undefined);
  });
});

test('a repeated Success report is counted once while the decode still waits for another prefill rank', async () => {
  await withInProcessRanks(PAIR_RANKS, async (make, port) => {
    // TP 2 -> 1: the decode needs a report from each prefill rank.
    const p0 = await make('prefill', layout(2, 0));
    const p1 = await make('prefill', layout(2, 1));
    const d = await make('decode', layout(1, 0));
    // Rank 0's first answer is lost, so it reports twice; rank 1 reports only after that.
    let repeated!: () => void;
    const twice = new Promise<void>((r) => (repeated = r));
    let p0Reports = 0;
    interceptControl(p0.engine, async (r) => {
      if (r.type !== MSG.status) return r.send();
      p0Reports++;
      const reply = await r.send();
      if (p0Reports === 1) throw noAnswer(r);
      // The decode answered the repeat, so it has counted it (once, or wrongly twice)
      // before rank 1 reports: the order is set by the answer, not by a clock.
      repeated();
      return reply;
    });
    interceptControl(p1.engine, async (r) => {
      if (r.type === MSG.status) await twice;
      return r.send();
    });
    const bootstrap = { host: '127.0.0.1', port, room: 11n };
    const receiver = d.manager.createReceiver(bootstrap);
    const senders = [p0, p1].map((p) => {
      fillPrefill(PAIR_MODEL, p.memory, 11n, Uint32Array.of(0, 1), 0);
      const s = p.manager.createSender(bootstrap);
      s.init(2, 0);
      return s;
    });
    await receiver.init(Uint32Array.of(2, 3), 0);
    await Promise.all(senders.map((s) => s.send(Uint32Array.of(0, 1), { last: true })));
    await receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 });
    assert.is(p0Reports, 2, 'rank 0 reported twice');
    const sent = senders.map((s) => (s as unknown as { bytes: number }).bytes);
    assert.ok(
      sent.every((b) => b > 0),
      `each prefill rank wrote bytes: ${sent}`,
    );
    assert.is((receiver as unknown as { bytes: number }).bytes, sent[0]! + sent[1]!, "the decode's byte count holds each rank's report once");
    assert.is(verifyDecode(PAIR_MODEL, d.memory, [{ room: 11n, pages: Uint32Array.of(2, 3), auxSlot: 0 }]), undefined);
  });
});

test.run();
