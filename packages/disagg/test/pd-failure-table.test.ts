import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  KVStatus,
  createTransferEngine,
  type KVBuffers,
  type KVReceiver,
  type KVSender,
  type ParallelLayout,
  type TransferEngine,
  type TransferError,
} from '@te/connector';
import { createKVManager, PD_MESSAGES, type DisaggKVManager, type PDTimeouts, type StagingOptions } from '../src/index.js';
import { allocateRank, fillPrefill, type ModelSpec } from './fixtures/pd-model.js';
import { gatedPlugin } from './gated-transport.js';
import { freePort, layout } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * docs/disagg.md promises that every PD failure is a TransferError whose details.room names
 * the room. This walks that document's failure table: each row is matched to a scenario
 * that causes it (ranks in this process over the testkit's fake transport, with the gate
 * that holds or fails chosen writes), and every error either side of the room ends with
 * must carry the room, and the row's code where the row names one. A row added to the
 * table without a scenario here fails the walk.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const PAGES = Uint32Array.of(0, 1, 2, 3);
const DEST = Uint32Array.of(8, 9, 10, 11);
const gated = gatedPlugin('table-gate');
const DOC = fileURLToPath(new URL('../../../docs/disagg.md', import.meta.url));

interface Rank {
  engine: TransferEngine;
  manager: DisaggKVManager;
  buffers: KVBuffers;
}
type Make = (
  role: 'prefill' | 'decode',
  l: ParallelLayout,
  o?: { model?: ModelSpec; timeouts?: Partial<PDTimeouts>; port?: number; staging?: StagingOptions; checksums?: boolean },
) => Promise<Rank>;
/** The errors one room ended with, by side (a side that did not end is left out). */
type Ended = { side: string; error: TransferError }[];

/** The failure table's rows: [failure, code cell]. */
function failureTable(): [string, string][] {
  const lines = readFileSync(DOC, 'utf8').split('\n');
  const start = lines.findIndex((l) => /^\| failure \| what happens \| code \|$/.test(l.trim()));
  assert.ok(start >= 0, 'docs/disagg.md has no failure table');
  const rows: [string, string][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const cells = line
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
    rows.push([cells[0]!, cells[cells.length - 1]!]);
  }
  return rows;
}

async function withRanks(body: (make: Make, port: number) => Promise<Ended>): Promise<Ended> {
  const port = await freePort();
  const made: Rank[] = [];
  try {
    return await body(async (role, l, o = {}) => {
      const engine = await createTransferEngine({ connector: 'table-gate' }, { registry: gated.registry() });
      const memory = await allocateRank(engine, o.model ?? MODEL, l);
      const manager = await createKVManager({
        role,
        layout: l,
        buffers: memory.buffers as KVBuffers,
        engine,
        bootstrapHost: '127.0.0.1',
        bootstrapPort: o.port ?? port,
        timeouts: { ...FAST, ...o.timeouts },
        ...(o.staging ? { staging: o.staging } : {}),
        checksums: o.checksums ?? false,
      });
      if (role === 'prefill') fillPrefill(o.model ?? MODEL, memory, 1n, PAGES, 1);
      made.push({ engine, manager, buffers: memory.buffers });
      return { engine, manager, buffers: memory.buffers };
    }, port);
  } finally {
    gated.reset();
    for (const r of made) await r.manager.close().catch(() => undefined);
    for (const r of made) await r.engine.close().catch(() => undefined);
  }
}

/** The error a sender or receiver ended with (undefined on Success), waiting at most `ms`. */
async function endOf(x: KVSender | KVReceiver, ms = 10_000): Promise<TransferError | undefined> {
  try {
    await x.cell.reached(KVStatus.Success, { timeoutMs: ms });
    return undefined;
  } catch {
    return x.failure;
  }
}

async function collect(pairs: [string, KVSender | KVReceiver][]): Promise<Ended> {
  const out: Ended = [];
  for (const [side, x] of pairs) {
    const e = await endOf(x);
    if (e) out.push({ side, error: e });
  }
  return out;
}

/** A prefill and a decode rank (TP 1) with room `room` open on both and ready to send. */
async function openRoom(
  make: Make,
  port: number,
  room: bigint,
  o: { prefill?: Partial<PDTimeouts>; decode?: Partial<PDTimeouts>; prefills?: ParallelLayout[]; ringBytes?: number; checksums?: boolean } = {},
) {
  const prefills = [];
  for (const l of o.prefills ?? [layout(1, 0)]) prefills.push(await make('prefill', l, { timeouts: o.prefill ?? {}, checksums: o.checksums ?? false }));
  const d = await make('decode', layout(1, 0), { timeouts: o.decode ?? {}, ...(o.ringBytes ? { staging: { ringBytes: o.ringBytes } } : {}) });
  const bootstrap = { host: '127.0.0.1', port, room };
  const senders = prefills.map((p) => {
    const s = p.manager.createSender(bootstrap);
    s.init(PAGES.length, 1);
    return s;
  });
  const receiver = d.manager.createReceiver(bootstrap);
  await receiver.init(DEST, 2);
  await Promise.all(senders.map((s) => s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 })));
  return { prefills, d, senders, sender: senders[0]!, receiver };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Scenario per row, keyed by the start of its failure cell; a string says why the row is no room's failure. */
const SCENARIOS: [string, ((room: bigint) => Promise<Ended>) | string][] = [
  [
    'bootstrap server unreachable',
    (room) =>
      withRanks(async (make) => {
        const nobody = await freePort();
        const d = await make('decode', layout(1, 0), { timeouts: { bootstrapMs: 600 } });
        const r = d.manager.createReceiver({ host: '127.0.0.1', port: nobody, room });
        await r.init(DEST, 2).catch(() => undefined);
        return collect([['decode', r]]);
      }),
  ],
  [
    'no destination reaches the prefill',
    (room) =>
      withRanks(async (make, port) => {
        const p = await make('prefill', layout(1, 0), { timeouts: { bootstrapMs: 500 } });
        return collect([['prefill', p.manager.createSender({ host: '127.0.0.1', port, room })]]);
      }),
  ],
  [
    'KV does not arrive',
    (room) =>
      withRanks(async (make, port) => {
        const { sender, receiver } = await openRoom(make, port, room, { decode: { waitingMs: 600 } });
        return collect([
          ['decode', receiver],
          ['prefill', sender],
        ]);
      }),
  ],
  [
    'prefill process dies',
    (room) =>
      withRanks(async (make, port) => {
        const { prefills, receiver } = await openRoom(make, port, room);
        // Gone without a word: its engine stops answering (a killed process closes nothing).
        await prefills[0]!.engine.close();
        return collect([['decode', receiver]]);
      }),
  ],
  [
    'one prefill rank of a room fails',
    (room) =>
      withRanks(async (make, port) => {
        const { prefills, senders, receiver } = await openRoom(make, port, room, { prefills: [layout(2, 0), layout(2, 1)] });
        const parked = gated.arm({ holdFrom: prefills[0]!.engine.segmentName, failFrom: prefills[1]!.engine.segmentName });
        const sent = senders.map((s) => s.send(PAGES, { last: true }).catch(() => undefined));
        await parked;
        await senders[1]!.cell.reached(KVStatus.Success).catch(() => undefined);
        gated.releaseAll();
        await Promise.all(sent);
        return collect([
          ['decode', receiver],
          ['prefill rank 0', senders[0]!],
          ['prefill rank 1', senders[1]!],
        ]);
      }),
  ],
  [
    'a prefill rank refuses a live decode after a connection-level failure',
    "needs a connect that gets no answer in time; the decode's init() wraps this error like every refused request (see the ADDRESS_OUT_OF_RANGE row)",
  ],
  ['the bootstrap server restarts', 'no room fails: pd-bootstrap-restart.test.ts shows rooms served again'],
  ['the answer to a Success report is lost or late', 'both sides end in Success'],
  [
    'the decode never answers a Success report',
    (room) =>
      withRanks(async (make, port) => {
        const { d, sender } = await openRoom(make, port, room);
        // The decode's control plane takes the report and never answers it (a decode stuck
        // after its request): the engine allows one handler per type, so the test swaps it.
        (d.engine.control as unknown as { handlers: Map<string, unknown> }).handlers.set(PD_MESSAGES.status, () => new Promise(() => undefined));
        await sender.send(PAGES, { last: true }).catch(() => undefined);
        return collect([['prefill', sender]]);
      }),
  ],
  [
    'decode process dies',
    (room) =>
      withRanks(async (make, port) => {
        const { d, sender } = await openRoom(make, port, room);
        await d.manager.close();
        await d.engine.close();
        await sender.send(PAGES, { last: true }).catch(() => undefined);
        return collect([['prefill', sender]]);
      }),
  ],
  [
    'page size, dtype, attention, layer count or head count differ',
    (room) =>
      withRanks(async (make, port) => {
        const p = await make('prefill', layout(1, 0));
        const d = await make('decode', layout(1, 0), { model: { ...MODEL, kvCacheDtype: 'fp8' } });
        const s = p.manager.createSender({ host: '127.0.0.1', port, room });
        const r = d.manager.createReceiver({ host: '127.0.0.1', port, room });
        await r.init(DEST, 2).catch(() => undefined);
        return collect([
          ['decode', r],
          ['prefill', s],
        ]);
      }),
  ],
  ["`bootstrapStore: 'etcd'` on an engine", 'refused at createKVManager, before any room'],
  ['a bootstrap port that fetch refuses', 'refused before any room: the test "a bootstrap port fetch refuses" below, and bootstrap-server.test.ts'],
  [
    'a decode whose mooncake-tcp build does not take scattered writes',
    "nothing fails: the room succeeds through the ring (test/pd-scatter-fallback.test.ts); the transport's refusal is tested against a hand-built target in plugins/mooncake-tcp/test/scattered-writes.test.ts",
  ],
  [
    'a decode fails or aborts a room while staged chunks are on their way to its ring',
    (room) =>
      withRanks(async (make, port) => {
        // Prefill TP 2 into decode TP 1 with NHD pages: every token row interleaves both ranks' heads.
        const { d, senders, receiver } = await openRoom(make, port, room, { prefills: [layout(2, 0), layout(2, 1)] });
        const parked = gated.arm({ hold: d.engine.segmentName });
        const sent = senders.map((s) => s.send(PAGES, { last: true }).catch(() => undefined));
        await parked;
        const aborting = receiver.abort().catch(() => undefined);
        // The abort reached both prefill ranks (each sender failed) while their writes are held.
        await Promise.all(senders.map((s) => s.cell.reached(KVStatus.Success, { timeoutMs: 10_000 }).catch(() => undefined)));
        gated.releaseAll();
        await Promise.all([aborting, ...sent]);
        return collect([
          ['decode', receiver],
          ['prefill rank 0', senders[0]!],
          ['prefill rank 1', senders[1]!],
        ]);
      }),
  ],
  [
    'a staged chunk finds no space',
    (room) =>
      withRanks(async (make, port) => {
        // A ring of one page: the chunks held on their way fill it, the next waits past the deadline.
        const short = { transferMs: 300 };
        const { d, senders, receiver } = await openRoom(make, port, room, {
          prefills: [layout(2, 0), layout(2, 1)],
          prefill: short,
          decode: short,
          ringBytes: 1024,
        });
        const parked = gated.arm({ hold: d.engine.segmentName });
        const sent = senders.map((s) => s.send(PAGES, { last: true }).catch(() => undefined));
        await parked;
        await Promise.all(senders.map((s) => s.cell.reached(KVStatus.Success, { timeoutMs: 10_000 }).catch(() => undefined)));
        gated.releaseAll();
        await Promise.all(sent);
        return collect([
          ['prefill rank 0', senders[0]!],
          ['prefill rank 1', senders[1]!],
          ['decode', receiver],
        ]);
      }),
  ],
  [
    'a scatter the decode cannot trust',
    'a refused control message, which fails the sending room by its code: pd-staging-failures.test.ts sends each such scatter and checks the code and that no byte moved',
  ],
  ['a staging ring given explicitly', 'refused at createKVManager, before any room (pd-staging-failures.test.ts)'],
  [
    'a destination page or aux slot outside',
    (room) =>
      withRanks(async (make, port) => {
        const p = await make('prefill', layout(1, 0));
        const d = await make('decode', layout(1, 0));
        const s = p.manager.createSender({ host: '127.0.0.1', port, room });
        s.init(2, 1);
        const r = d.manager.createReceiver({ host: '127.0.0.1', port, room });
        await r.init(Uint32Array.of(3, 999), 2).catch(() => undefined);
        return collect([
          ['decode', r],
          ['prefill', s],
        ]);
      }),
  ],
  [
    '`abort()` on the decode',
    (room) =>
      withRanks(async (make, port) => {
        const { sender, receiver } = await openRoom(make, port, room);
        await receiver.abort();
        return collect([
          ['decode', receiver],
          ['prefill', sender],
        ]);
      }),
  ],
  [
    'bytes that landed differ from what the prefill sent',
    (room) =>
      withRanks(async (make, port) => {
        const { d, sender, receiver } = await openRoom(make, port, room, { checksums: true });
        // A byte of the first destination page changes after the write landed, before the
        // decode takes the report (the engine allows one handler per type: the test wraps it).
        const handlers = (d.engine.control as unknown as { handlers: Map<string, (b: unknown) => unknown> }).handlers;
        const original = handlers.get(PD_MESSAGES.status)!;
        handlers.set(PD_MESSAGES.status, (b) => {
          const item = d.buffers.kv.itemLengths[0]!;
          d.engine.hostView(d.buffers.kv.addrs[0]! + BigInt(DEST[0]!) * item, 1n)![0]! ^= 0xff;
          return original(b);
        });
        await sender.send(PAGES, { last: true }).catch(() => undefined);
        return collect([
          ['decode', receiver],
          ['prefill', sender],
        ]);
      }),
  ],
  [
    '`abort()` on the prefill',
    (room) =>
      withRanks(async (make, port) => {
        const { sender, receiver } = await openRoom(make, port, room);
        await sender.abort();
        return collect([
          ['prefill', sender],
          ['decode', receiver],
        ]);
      }),
  ],
  [
    'a transport holds a write past its deadline',
    (room) =>
      withRanks(async (make, port) => {
        const { d, sender, receiver } = await openRoom(make, port, room, { prefill: { transferMs: 300 } });
        const parked = gated.arm({ hold: d.engine.segmentName });
        const sending = sender.send(PAGES, { last: true }).catch(() => undefined);
        await parked;
        await sender.cell.reached(KVStatus.Success).catch(() => undefined);
        gated.releaseAll();
        await sending;
        return collect([
          ['prefill', sender],
          ['decode', receiver],
        ]);
      }),
  ],
  [
    'a transport settles a cancelled write to a decode without',
    (room) =>
      withRanks(async (make, port) => {
        const { d, sender, receiver } = await openRoom(make, port, room);
        const parked = gated.arm({ hold: d.engine.segmentName });
        const sending = sender.send(PAGES, { last: true }).catch(() => undefined);
        await parked;
        const aborting = sender.abort().catch(() => undefined);
        await sleep(50);
        gated.releaseAll({ unconfirmed: true });
        await Promise.all([sending, aborting]);
        const ended = await collect([
          ['prefill', sender],
          ['decode', receiver],
        ]);
        assert.is(receiver.failure?.details?.pagesMayBeWritten, true, 'the decode hears that its pages may still be written');
        return ended;
      }),
  ],
];

const rows = failureTable();

test('a bootstrap port fetch refuses: createKVManager and createReceiver refuse it (createSender runs the same check), naming why', async () => {
  const engine = await createTransferEngine({ connector: 'table-gate' }, { registry: gated.registry() });
  try {
    const memory = await allocateRank(engine, MODEL, layout(1, 0));
    const base = { layout: layout(1, 0), buffers: memory.buffers as KVBuffers, engine, bootstrapHost: '127.0.0.1', timeouts: FAST };
    const refused = await createKVManager({ ...base, role: 'prefill', bootstrapPort: 10080 }).then(
      (m) => m.close().then(() => undefined),
      (e: unknown) => e as TransferError,
    );
    assert.is(refused?.code, 'INVALID_CONFIG');
    assert.match(refused!.message, /bootstrapPort 10080: port 10080 is one fetch refuses to connect to/);
    const decode = await createKVManager({ ...base, role: 'decode', bootstrapPort: await freePort() });
    try {
      for (const port of [10080, 6000]) {
        assert.throws(
          () => decode.createReceiver({ host: '127.0.0.1', port, room: 7n }),
          (e: TransferError) => e.code === 'INVALID_ARGUMENT' && e.message.includes(`port ${port} is one fetch refuses`),
        );
      }
    } finally {
      await decode.close();
    }
  } finally {
    await engine.close();
  }
});

test('every row of the failure table has a scenario here, and every scenario a row', () => {
  assert.ok(rows.length >= 10, `only ${rows.length} rows parsed`);
  for (const [failure] of rows) assert.is(SCENARIOS.filter(([key]) => failure.startsWith(key)).length, 1, `row "${failure}" has no scenario (or several)`);
  for (const [key] of SCENARIOS)
    assert.ok(
      rows.some(([failure]) => failure.startsWith(key)),
      `scenario "${key}" matches no row`,
    );
});

let next = 0x7100n;
for (const [key, scenario] of SCENARIOS) {
  const row = rows.find(([failure]) => failure.startsWith(key));
  if (typeof scenario === 'string') {
    test.skip(`${key} — skipped: ${scenario}`, () => undefined);
    continue;
  }
  const room = next++;
  test(`${key}: every side that fails names room ${room}${row && /^`[A-Z_]+`$/.test(row[1]) ? ` with ${row[1]}` : ''}`, async () => {
    const ended = await scenario(room);
    assert.ok(ended.length > 0, 'nothing failed: the scenario does not cause this row');
    const code = row && /^`([A-Z_]+)`$/.exec(row[1])?.[1];
    // The row's code is the one of the side it describes (listed first); the other side may
    // end otherwise (a decode's waiting timeout aborts the prefill's room).
    if (code) assert.is(ended[0]!.error.code, code, `${ended[0]!.side}: ${ended[0]!.error.message}`);
    for (const { side, error } of ended) assert.is(error.details?.room, room, `${side}: ${error.code}: ${error.message}`);
  });
}

test.run();
