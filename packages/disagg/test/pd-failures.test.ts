import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Socket } from 'node:net';
import { createTransferEngine, isTransferError, type TransferEngine } from '@te/connector';
import { PD_MESSAGES } from '../src/index.js';
import { closeAll, freePort, layout, roomArgs, spawnRank, TCP_CONFIG, type RankProcess } from './pd-harness.js';
import { FAST } from './pd-scenario.js';
import type { ModelSpec } from './fixtures/pd-model.js';

/*
 * Failure handling across real processes: each failure ends as a typed error carrying
 * the room, within its deadline, and other rooms are unaffected.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 4, heads: 4, headBytes: 16, pageSize: 4, pages: 32, auxSlots: 8, auxBytes: 64 };
const L = layout(1, 0);
const PAGES = [0, 1, 2, 3, 4, 5, 6, 7];
const CHUNK2 = [12, 13, 14, 15]; // destination pages of the second chunk
const DST = [8, 9, 10, 11, ...CHUNK2];
const CONNECTION_CODES = ['CONNECTION_LOST', 'PEER_UNREACHABLE', 'PEER_FAILED'];

async function prefill(port: number, extra = {}): Promise<RankProcess> {
  return spawnRank({ role: 'prefill', layout: L, model: MODEL, bootstrapPort: port, timeouts: FAST, ...extra });
}
async function decode(port: number, extra = {}): Promise<RankProcess> {
  return spawnRank({ role: 'decode', layout: L, model: MODEL, bootstrapPort: port, timeouts: FAST, ...extra });
}

test('prefill killed mid-transfer: the decode room fails within the heartbeat deadline; a room on another prefill succeeds', async () => {
  const [pa, pb] = [await freePort(), await freePort()];
  const ranks: RankProcess[] = [];
  try {
    const [a, b, d] = await Promise.all([prefill(pa), prefill(pb), decode(pa)]);
    ranks.push(a, b, d);
    const doomed = d.call('receive', roomArgs(1n, DST, 1));
    void a.call('send', roomArgs(1n, PAGES, 1, { chunks: 2, pauseMs: 30_000 })).catch(() => undefined);
    await a.event('chunk');
    const killedAt = Date.now();
    a.kill('SIGKILL');
    const other = Promise.all([b.call('send', roomArgs(2n, PAGES, 2)), d.call('receive', roomArgs(2n, [16, 17, 18, 19, 20, 21, 22, 23], 2, { port: pb }))]);
    const r = await doomed;
    const waited = Date.now() - killedAt;
    assert.is(r.status, 0);
    assert.is(r.code, 'PEER_FAILED', r.message);
    assert.match(r.message!, /room 1/);
    // heartbeat 300 ms × 2 misses, plus scheduling slack on a loaded machine
    assert.ok(waited < 5_000, `failed after ${waited} ms`);
    const [s2, r2] = await other;
    assert.is(s2.status, 4);
    assert.is(r2.status, 4, r2.message);
    // Room 2 landed exactly; room 1's pages (a partial transfer) are the framework's to free.
    assert.equal(await d.call('verify'), { mismatch: null });
  } finally {
    await closeAll(ranks);
  }
});

test('decode killed: the prefill room fails with a connection error; a room to another decode succeeds', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const [p, d1, d2] = await Promise.all([prefill(port), decode(port), decode(port)]);
    ranks.push(p, d1, d2);
    void d1.call('receive', roomArgs(5n, DST, 1)).catch(() => undefined);
    const doomed = p.call('send', roomArgs(5n, PAGES, 1, { chunks: 2, pauseMs: 1_000 }));
    await p.event('chunk');
    d1.kill('SIGKILL');
    const started = Date.now();
    const [r, ok1, ok2] = await Promise.all([doomed, p.call('send', roomArgs(6n, PAGES, 3)), d2.call('receive', roomArgs(6n, DST, 3))]);
    assert.is(r.status, 0);
    assert.ok(CONNECTION_CODES.includes(r.code!), `${r.code}: ${r.message}`);
    assert.match(r.message!, /room 5/);
    assert.ok(Date.now() - started < 10_000);
    assert.is(ok1.status, 4, ok1.message);
    assert.is(ok2.status, 4, ok2.message);
    assert.is(ok2.mismatch, null);
  } finally {
    await closeAll(ranks);
  }
});

test('abort from the decode resolves after the prefill acknowledged, and no later byte lands', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const [p, d] = await Promise.all([prefill(port), decode(port)]);
    ranks.push(p, d);
    const receiving = d.call('receive', roomArgs(7n, DST, 1));
    const sending = p.call('send', roomArgs(7n, PAGES, 1, { chunks: 2, pauseMs: 1_000 }));
    await p.event('chunk'); // first chunk landed; the second would follow after the pause
    const aborted = await d.call('abort', { room: '7' });
    assert.ok(aborted.ok, `${aborted.code}: ${aborted.message}`);
    const [sent, got] = await Promise.all([sending, receiving]);
    assert.is(got.status, 0);
    assert.is(got.code, 'ABORTED');
    assert.is(sent.status, 0);
    assert.is(sent.code, 'ABORTED', sent.message);
    const before = await d.call('digest');
    await new Promise((r) => setTimeout(r, 1_500)); // past the point where chunk 2 would have been written
    assert.equal(await d.call('digest'), before, 'decode memory changed after the abort resolved');
    assert.equal(await d.call('untouched', { pages: CHUNK2 }), { untouched: true });
    // The pair still works for the next room.
    const [s, r] = await Promise.all([p.call('send', roomArgs(8n, [20, 21], 2)), d.call('receive', roomArgs(8n, [24, 25], 2))]);
    assert.is(s.status, 4);
    assert.is(r.status, 4, r.message);
  } finally {
    await closeAll(ranks);
  }
});

test('bootstrap server that never answers: the receiver fails with TIMEOUT', async () => {
  const held: Socket[] = [];
  const silent = createServer((s) => held.push(s)); // accepts, never replies
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
  const port = (silent.address() as { port: number }).port;
  let d: RankProcess | undefined;
  try {
    d = await decode(port, { timeouts: { ...FAST, bootstrapMs: 1_500 } });
    const started = Date.now();
    const r = await d.call('receive', roomArgs(9n, DST, 1));
    assert.is(r.status, 0);
    assert.is(r.code, 'TIMEOUT', r.message);
    assert.match(r.message!, /bootstrap server 127\.0\.0\.1:\d+/);
    assert.ok(Date.now() - started < 6_000);
  } finally {
    await closeAll([d]);
    for (const s of held) s.destroy();
    silent.close();
  }
});

test('page size mismatch is refused at bootstrap, naming both values', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const p = await prefill(port);
    ranks.push(p);
    const d = await spawnRank({ role: 'decode', layout: L, model: { ...MODEL, pageSize: 6 }, bootstrapPort: port, timeouts: FAST });
    ranks.push(d);
    const r = await d.call('receive', roomArgs(10n, [0, 1], 1));
    assert.is(r.status, 0);
    assert.is(r.code, 'LAYOUT_MISMATCH');
    assert.match(r.message!, /page_size/);
    assert.match(r.message!, /decode has page_size=6, prefill has page_size=4 \(a decode page must hold a whole number of prefill pages\)/);
  } finally {
    await closeAll(ranks);
  }
});

test('malformed or unknown messages on the rank channel are refused and the rank keeps serving', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  let probe: TransferEngine | undefined;
  try {
    const [p, d] = await Promise.all([prefill(port), decode(port)]);
    ranks.push(p, d);
    probe = await createTransferEngine(TCP_CONFIG);
    const client = probe.controlClient(p.segment);
    const bad: [string, unknown][] = [
      [PD_MESSAGES.request, { v: 1, room: 'x' }],
      [PD_MESSAGES.request, null],
      [PD_MESSAGES.register, { v: 1, decodeSegment: 7 }],
      [PD_MESSAGES.abort, { v: 1, room: -1n, decodeSegment: 'a:1' }],
      [PD_MESSAGES.request, { v: 2, room: 1n }],
      ['te.kv.p.bogus', {}],
    ];
    for (const [type, body] of bad) {
      const e = await client.request(type, body, 5_000).then(
        () => undefined,
        (x: unknown) => x,
      );
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${type} ${JSON.stringify(body, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}: ${String(e)}`);
    }
    // The decode's channel: a status whose flags are not booleans is refused too.
    const toDecode = probe.controlClient(d.segment);
    for (const body of [
      { v: 1, room: 5n, prefillTpRank: 0, prefillPpRank: 0, status: 0, pagesMayBeWritten: 'yes' },
      { v: 1, room: 5n, prefillTpRank: 0, prefillPpRank: 0, status: 0, pagesMayBeWritten: 1 },
    ]) {
      const e = await toDecode.request(PD_MESSAGES.status, body, 5_000).then(
        () => undefined,
        (x: unknown) => x,
      );
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `status ${JSON.stringify(body, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}: ${String(e)}`);
      assert.match((e as Error).message, /pagesMayBeWritten/);
    }
    // A request from a decode that never registered is refused as such.
    const unregistered = await client
      .request(
        PD_MESSAGES.request,
        {
          v: 1,
          room: 3n,
          decodeSegment: 'nobody:1',
          decodeTpRank: 0,
          pages: Uint32Array.of(1),
          auxIndex: 0,
          requiredDecodeRanks: 1,
          dummy: false,
          sendsAux: true,
          sendsState: false,
        },
        5_000,
      )
      .then(
        () => undefined,
        (x: unknown) => x,
      );
    assert.ok(isTransferError(unregistered, 'STALE_DESCRIPTOR'), String(unregistered));
    const [s, r] = await Promise.all([p.call('send', roomArgs(11n, PAGES, 1)), d.call('receive', roomArgs(11n, DST, 1))]);
    assert.is(s.status, 4);
    assert.is(r.status, 4, r.message);
    assert.is(r.mismatch, null);
  } finally {
    await probe?.close();
    await closeAll(ranks);
  }
});

test('a destination page outside the decode buffers is refused before anything is written', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const [p, d] = await Promise.all([prefill(port), decode(port)]);
    ranks.push(p, d);
    const [s, r] = await Promise.all([p.call('send', roomArgs(12n, [0, 1], 1)), d.call('receive', roomArgs(12n, [3, 999], 1))]);
    assert.is(r.status, 0);
    assert.is(r.code, 'ADDRESS_OUT_OF_RANGE', r.message);
    assert.is(s.status, 0); // the prefill never heard a valid destination: bootstrap timeout or refusal
    // verify() skips a failed room's pages, so the valid page of the refused room is checked
    // byte by byte: it still holds the sentinel the decode filled it with.
    assert.equal(await d.call('untouched', { pages: [3] }), { untouched: true });
    assert.equal(await d.call('verify'), { mismatch: null });
  } finally {
    await closeAll(ranks);
  }
});

test.run();
