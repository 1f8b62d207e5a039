import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { ParallelLayout } from '@te/connector';
import { closeAll, freePort, layout, roomArgs, spawnRank, type RankProcess } from './pd-harness.js';
import { FAST, STEADY } from './pd-scenario.js';
import type { ModelSpec } from './fixtures/pd-model.js';

/*
 * Layerwise transfer across real processes over mooncake-tcp: the prefill runs a forward
 * batch (a timed wait per layer), marking each layer ready; the decode checks its whole
 * memory against what the normal path writes, byte for byte.
 */
const GQA: ModelSpec = { attention: 'mha', totalLayers: 6, heads: 2, headBytes: 16, pageSize: 4, pages: 40, auxSlots: 8, auxBytes: 64 };
const MHA8: ModelSpec = { ...GQA, heads: 8 };
const ROOMS = [
  { room: 101n, src: [0, 1, 2, 3], dst: [4, 5, 9, 10], aux: [0, 1] },
  { room: 102n, src: [4, 5, 6], dst: [11, 12, 13], aux: [1, 2] },
  { room: 103n, src: [7, 9, 11, 13, 15], dst: [20, 21, 22, 30, 31], aux: [2, 3] },
];

interface Ranks {
  prefill: RankProcess[];
  decode: RankProcess[];
}

async function start(model: ModelSpec, p: ParallelLayout[], d: ParallelLayout[], layerwise = true): Promise<Ranks & { all: RankProcess[] }> {
  const port = await freePort();
  const common = { model, bootstrapPort: port, timeouts: STEADY };
  const prefill = await Promise.all(p.map((l) => spawnRank({ role: 'prefill', layout: l, layerwise, ...common })));
  const decode = await Promise.all(d.map((l) => spawnRank({ role: 'decode', layout: l, ...common })));
  return { prefill, decode, all: [...prefill, ...decode] };
}

const tps = (n: number) => Array.from({ length: n }, (_, i) => layout(n, i));
const args = (r: (typeof ROOMS)[number], extra: Record<string, unknown> = {}) => ({
  src: roomArgs(r.room, r.src, r.aux[0]!, extra.stateSrc ? { stateIdx: extra.stateSrc } : {}),
  dst: roomArgs(r.room, r.dst, r.aux[1]!, extra.stateDst ? { stateIdx: extra.stateDst } : {}),
});

/** Runs one layerwise batch of `rooms` on every prefill rank, the receives on every decode rank. */
async function runBatch(
  r: Ranks,
  rooms: (typeof ROOMS)[number][],
  batchArgs: Record<string, unknown> = {},
  state?: (i: number) => { stateSrc: number[]; stateDst: number[] },
) {
  const a = rooms.map((room, i) => args(room, state?.(i) ?? {}));
  const receives = r.decode.map((d) => Promise.all(a.map((x) => d.call('receive', x.dst))));
  const batches = r.prefill.map((p) => p.call('batch', { rooms: a.map((x) => x.src), ...batchArgs }));
  return { receives: Promise.all(receives), batches: Promise.all(batches) };
}

async function expectAllDelivered(
  r: Ranks,
  rooms: (typeof ROOMS)[number][],
  batchArgs: Record<string, unknown> = {},
  state?: (i: number) => { stateSrc: number[]; stateDst: number[] },
) {
  const run = await runBatch(r, rooms, batchArgs, state);
  const [got, sent] = await Promise.all([run.receives, run.batches]);
  // Rooms of one batch land concurrently: the whole memory is checked once all succeeded.
  for (const perRank of got) for (const x of perRank) assert.is(x.status, 4, `${x.code}: ${x.message}`);
  for (const s of sent) {
    for (const x of s.results) assert.is(x.status, 4, `${x.code}: ${x.message}`);
    assert.is(s.stats.layerwiseRooms, rooms.length, 'every room went layer by layer');
  }
  for (const d of r.decode) assert.equal(await d.call('verify'), { mismatch: null });
  return sent;
}

test('GQA, equal TP 2→2, a batch of three requests: the same bytes as the normal path', async () => {
  const r = await start(GQA, tps(2), tps(2));
  try {
    await expectAllDelivered(r, ROOMS);
  } finally {
    await closeAll(r.all);
  }
});

test('heterogeneous TP 4→2 with head slicing, layer by layer', async () => {
  const r = await start(MHA8, tps(4), tps(2));
  try {
    await expectAllDelivered(r, ROOMS.slice(0, 2));
  } finally {
    await closeAll(r.all);
  }
});

test('Mamba state sent per layer, and a withheld state still delivered before Success', async () => {
  const model: ModelSpec = { ...GQA, state: { kind: 'mamba', units: 2, unitBytes: 32, slots: 6 } };
  const state = (i: number) => ({ stateSrc: [i + 1], stateDst: [5 - i] });
  let r = await start(model, tps(1), tps(1));
  try {
    await expectAllDelivered(r, ROOMS.slice(0, 2), {}, state);
  } finally {
    await closeAll(r.all);
  }
  r = await start(model, tps(1), tps(1));
  try {
    await expectAllDelivered(r, ROOMS.slice(0, 2), { withholdState: true }, state);
  } finally {
    await closeAll(r.all);
  }
});

test('a failure at layer k (one decode killed) fails that room only; nothing hangs', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const common = { model: GQA, bootstrapPort: port, timeouts: FAST };
    const p = await spawnRank({ role: 'prefill', layout: layout(1, 0), layerwise: true, ...common });
    const [dA, dB] = await Promise.all([
      spawnRank({ role: 'decode', layout: layout(1, 0), ...common }),
      spawnRank({ role: 'decode', layout: layout(1, 0), ...common }),
    ]);
    ranks.push(p, dA, dB);
    const [a, b] = [args(ROOMS[0]!), args(ROOMS[1]!)];
    const gotA = dA.call('receive', a.dst);
    void dB.call('receive', b.dst).catch(() => undefined);
    const batch = p.call('batch', { rooms: [a.src, b.src], pauseAt: 3, layerMs: 5 });
    await p.event('paused');
    dB.kill('SIGKILL');
    await p.call('resume');
    const [sent, okA] = await Promise.all([batch, gotA]);
    const byRoom = Object.fromEntries(sent.results.map((x) => [x.room, x]));
    assert.is(byRoom['101'].status, 4, byRoom['101'].message);
    assert.is(byRoom['102'].status, 0);
    assert.ok(['CONNECTION_LOST', 'PEER_UNREACHABLE', 'PEER_FAILED'].includes(byRoom['102'].code!), `${byRoom['102'].code}: ${byRoom['102'].message}`);
    assert.match(byRoom['102'].message!, /room 102/);
    assert.is(okA.status, 4);
    // Room 102's layers before k may have landed in decode B, never in A: A's memory is exactly room 101.
    assert.equal(await dA.call('verify'), { mismatch: null });
  } finally {
    await closeAll(ranks);
  }
});

test('a room aborted at layer k receives no later layer; the others complete', async () => {
  const r = await start(GQA, tps(1), tps(1));
  try {
    const [a, b] = [args(ROOMS[0]!), args(ROOMS[1]!)];
    const d = r.decode[0]!;
    const gotA = d.call('receive', a.dst);
    const gotB = d.call('receive', b.dst);
    const batch = r.prefill[0]!.call('batch', { rooms: [a.src, b.src], pauseAt: 3, layerMs: 5 });
    await r.prefill[0]!.event('paused'); // layers 0..2 marked ready, 3.. not yet
    const aborted = await d.call('abort', { room: '101' });
    assert.ok(aborted.ok, aborted.message);
    await r.prefill[0]!.call('resume');
    const [sent, resA, resB] = await Promise.all([batch, gotA, gotB]);
    assert.is(resA.code, 'ABORTED');
    assert.is(sent.results[0].code, 'ABORTED');
    assert.is(resB.status, 4, resB.message);
    await new Promise((res) => setTimeout(res, 300));
    assert.equal(await d.call('layersUntouched', { pages: ROOMS[0]!.dst, fromLayer: 3 }), { untouched: true });
  } finally {
    await closeAll(r.all);
  }
});

test('fallbacks: a chunked request and a disabled manager take the normal path, counted by reason, bytes exact', async () => {
  let r = await start(GQA, tps(1), tps(1));
  try {
    const run = await runBatch(r, ROOMS.slice(0, 2), { chunkFirst: true });
    const [got, sent] = await Promise.all([run.receives, run.batches]);
    for (const x of got[0]) assert.is(x.status, 4, x.message);
    assert.equal(sent[0].stats, { layerwiseRooms: 1, fallbacks: { chunked: 1 } });
    assert.equal(await r.decode[0]!.call('verify'), { mismatch: null });
  } finally {
    await closeAll(r.all);
  }
  r = await start(GQA, tps(1), tps(1), false);
  try {
    const run = await runBatch(r, ROOMS.slice(0, 1));
    const [got, sent] = await Promise.all([run.receives, run.batches]);
    assert.is(got[0][0].status, 4);
    assert.equal(sent[0].stats, { layerwiseRooms: 0, fallbacks: { disabled: 1 } });
  } finally {
    await closeAll(r.all);
  }
});

test.run();
