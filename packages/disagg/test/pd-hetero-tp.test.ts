import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeAll, freePort, layout, roomArgs, spawnRank, type RankProcess } from './pd-harness.js';
import { STEADY, runScenario, type Scenario, type ScenarioStats } from './pd-scenario.js';
import type { ModelSpec } from './fixtures/pd-model.js';
import type { StagingStats } from '../src/index.js';

/*
 * Heterogeneous TP across page layouts and page sizes, every rank its own process over
 * mooncake-tcp. KV bytes are a function of (room, layer, global head, token, K/V, byte)
 * and every decode rank's whole memory is compared with what its rooms should have
 * written. Each case also checks which route the bytes took (staged in prefill memory,
 * staged on the decode's ring, or row by row), so a silent fallback fails it.
 */
const MHA8: ModelSpec = { attention: 'mha', totalLayers: 3, heads: 8, headBytes: 16, pageSize: 4, pages: 24, auxSlots: 8, auxBytes: 64 };
const ROOM = { room: 0x1234_5678_9abcn, srcPages: [2, 3, 4, 9, 10, 17], dstPages: [5, 6, 7, 8, 1, 20], auxSrc: 1, auxDst: 6 };
const ROOM2 = { room: 0x7fff_ffff_ffff_fff1n, srcPages: [0, 1, 2, 3], dstPages: [10, 11, 12, 13], auxSrc: 2, auxDst: 3 };
const tps = (n: number) => Array.from({ length: n }, (_, i) => layout(n, i));
// Up to 18 processes on two cores: heartbeats get room so a busy machine is not a lost peer.
const TIMEOUTS = STEADY;

type Route = 'gather' | 'ring' | 'direct' | 'rows' | 'transport' | 'scatter';

function sum(stats: ScenarioStats, key: 'gatherWrites' | 'ringWrites' | 'transportGathers' | 'transportScatters'): number {
  return stats.prefill.reduce((a, s) => a + (s?.[key] ?? 0), 0);
}

function fallbacks(stats: ScenarioStats): number {
  return stats.prefill.reduce((a, s) => a + Object.values(s?.fallbacks ?? {}).reduce((x, y) => x + y, 0), 0);
}

/** Asserts the route the KV took: staged here, staged on the decode's ring, straight, or row by row (fallback). */
function expectRoute(stats: ScenarioStats, route: Route): void {
  const g = sum(stats, 'gatherWrites');
  const r = sum(stats, 'ringWrites');
  const t = sum(stats, 'transportGathers');
  const x = sum(stats, 'transportScatters');
  const f = fallbacks(stats);
  const seen = JSON.stringify(stats.prefill);
  if (route !== 'transport') assert.is(t, 0, `expected no gathered writes: ${seen}`);
  if (route !== 'scatter') assert.is(x, 0, `expected no scattered writes: ${seen}`);
  if (route === 'scatter') {
    assert.ok(x > 0 && g === 0 && r === 0 && f === 0, `expected writes the transport scattered only: ${seen}`);
    assert.ok(
      stats.decode.every((d) => (d?.scatteredBytes ?? 0) === 0),
      `no decode rank scattered: ${JSON.stringify(stats.decode)}`,
    );
  }
  if (route === 'transport') assert.ok(t > 0 && g === 0 && r === 0 && f === 0, `expected writes the transport gathered only: ${seen}`);
  if (route === 'gather') assert.ok(g > 0 && r === 0 && f === 0, `expected gathers only: ${seen}`);
  if (route === 'ring') {
    assert.ok(r > 0 && g === 0 && f === 0, `expected ring writes only: ${seen}`);
    assert.ok(
      stats.decode.some((d) => (d?.scatteredBytes ?? 0) > 0),
      `a decode rank scattered: ${JSON.stringify(stats.decode)}`,
    );
  }
  if (route === 'direct') assert.ok(g === 0 && r === 0 && f === 0, `expected no staging at all: ${seen}`);
  if (route === 'rows') assert.ok(g === 0 && r === 0 && f > 0, `expected per-token fallbacks: ${seen}`);
}

async function run(s: Omit<Scenario, 'rooms'> & { rooms?: Scenario['rooms'] }, route: Route): Promise<void> {
  expectRoute(await runScenario({ rooms: [ROOM, ROOM2], timeouts: TIMEOUTS, ...s }), route);
}

const NHD = { pageLayout: 'NHD' as const };
const HND = { pageLayout: 'HND' as const };

for (const [p, d, route] of [
  [1, 2, 'gather'],
  [2, 4, 'gather'],
  [2, 8, 'gather'],
  [4, 2, 'ring'],
  [8, 2, 'ring'],
] as const) {
  test(`TP ${p}→${d}, NHD both sides: ${route === 'gather' ? 'gathered in prefill staging, written as whole pages' : 'staged on the decode ring, scattered there'}`, async () => {
    await run({ model: MHA8, prefill: tps(p), decode: tps(d) }, route);
  });
}

// Pages of 16 tokens × 128-byte heads: a decode rank's slice of a page is 16 rows of 256
// bytes (4 KiB), enough for a gathered write of its own.
const WIDE: ModelSpec = { ...MHA8, headBytes: 128, pageSize: 16 };

for (const [p, d] of [
  [1, 2],
  [2, 4],
] as const) {
  test(`TP ${p}→${d}, NHD both sides, over mooncake-tcp: the transport gathers each slice's rows from the pages (no staging copy)`, async () => {
    await run({ model: WIDE, prefill: tps(p), decode: tps(d) }, 'transport');
  });
}

test('TP 2→8, NHD: slices of 2 KiB, under the smallest gathered write, are packed by the staging copier', async () => {
  await run({ model: WIDE, prefill: tps(2), decode: tps(8) }, 'gather');
});

test('TP 2→4, NHD, transportGather off: the same slices go through the staging copier', async () => {
  await run({ model: WIDE, prefill: tps(2), decode: tps(4), prefillStaging: { transportGather: false } }, 'gather');
});

// Heads of 256 bytes: a prefill rank's slice of a page is 16 rows of 256 to 512 bytes, 4 KiB
// or more, written by the transport straight into the decode pages' rows.
const WIDER: ModelSpec = { ...MHA8, headBytes: 256, pageSize: 16 };

test("TP 4→2 and 8→2, NHD both sides, over mooncake-tcp: the transport writes each slice into the decode pages' rows (no ring, no scatter copy)", async () => {
  await run({ model: WIDER, prefill: tps(4), decode: tps(2) }, 'scatter');
  await run({ model: WIDER, prefill: tps(8), decode: tps(2) }, 'scatter');
});

test("TP 4→2, HND → NHD over mooncake-tcp: each head's tokens written into the decode rows", async () => {
  await run({ model: WIDER, prefill: tps(4), decode: tps(2), prefillSide: HND, decodeSide: NHD }, 'scatter');
});

test("TP 4→2, NHD, decode page 2× the prefill's: the transport writes each prefill page's slice into its half of a decode page", async () => {
  const rooms = [
    { ...ROOM, dstPages: [5, 9, 1] },
    { ...ROOM2, dstPages: [10, 11] },
  ];
  await run({ model: WIDER, prefill: tps(4), decode: tps(2), decodeSide: { pageSize: 32 }, rooms }, 'scatter');
});

test('TP 4→2, NHD, transportScatter off: the same slices go through the decode ring', async () => {
  await run({ model: WIDER, prefill: tps(4), decode: tps(2), prefillStaging: { transportScatter: false } }, 'ring');
});

test('TP 2→4 and 4→2, HND both sides: one range per page per layer, no staging', async () => {
  await run({ model: MHA8, prefill: tps(2), decode: tps(4), prefillSide: HND, decodeSide: HND }, 'direct');
  await run({ model: MHA8, prefill: tps(4), decode: tps(2), prefillSide: HND, decodeSide: HND }, 'direct');
});

test('TP 2→4, HND both sides, slices of 4 KiB over mooncake-tcp: consecutive pages landing in a run of decode pages go as one request of rows the transport gathers', async () => {
  await run({ model: WIDE, prefill: tps(2), decode: tps(4), prefillSide: HND, decodeSide: HND }, 'transport');
  // TP 4→2: each piece is a whole prefill page, so runs merge as plain ranges; no rows.
  await run({ model: WIDE, prefill: tps(4), decode: tps(2), prefillSide: HND, decodeSide: HND }, 'direct');
});

test('TP 2→4, NHD → HND and HND → NHD: re-laid out in prefill staging', async () => {
  await run({ model: MHA8, prefill: tps(2), decode: tps(4), prefillSide: NHD, decodeSide: HND }, 'gather');
  await run({ model: MHA8, prefill: tps(2), decode: tps(4), prefillSide: HND, decodeSide: NHD }, 'gather');
});

test('TP 4→2, NHD → HND (each slice one range of a HND page) and HND → NHD (interleaved: the ring)', async () => {
  await run({ model: MHA8, prefill: tps(4), decode: tps(2), prefillSide: NHD, decodeSide: HND }, 'gather');
  await run({ model: MHA8, prefill: tps(4), decode: tps(2), prefillSide: HND, decodeSide: NHD }, 'ring');
});

test('TP 1→1 with HND on one side only: the whole page re-laid out', async () => {
  await run({ model: MHA8, prefill: tps(1), decode: tps(1), prefillSide: HND }, 'gather');
});

test("decode page 2× the prefill's (NHD, TP 1→1 and 2→4): prefill pages mapped by token range", async () => {
  const rooms = [
    { ...ROOM, dstPages: [5, 9, 1] },
    { ...ROOM2, dstPages: [10, 11] },
  ];
  await run({ model: MHA8, prefill: tps(1), decode: tps(1), decodeSide: { pageSize: 8 }, rooms }, 'direct');
  await run({ model: MHA8, prefill: tps(2), decode: tps(4), decodeSide: { pageSize: 8 }, rooms }, 'gather');
});

test("decode page 4× the prefill's (TP 4→2 NHD, and HND both sides: the ring)", async () => {
  const rooms = [
    { ...ROOM, dstPages: [3, 0] },
    { ...ROOM2, dstPages: [4] },
  ];
  await run({ model: MHA8, prefill: tps(4), decode: tps(2), decodeSide: { pageSize: 16 }, rooms }, 'ring');
  await run({ model: MHA8, prefill: tps(2), decode: tps(2), prefillSide: HND, decodeSide: { pageSize: 16, pageLayout: 'HND' }, rooms }, 'ring');
});

test('staging off: the same layouts row by row, counted as fallbacks', async () => {
  await run({ model: MHA8, prefill: tps(2), decode: tps(4), prefillStaging: { enabled: false } }, 'rows');
  await run({ model: MHA8, prefill: tps(4), decode: tps(2), decodeStaging: { ringBytes: 0 } }, 'rows');
});

test('GQA replication: TP 2 → 16 with 8 KV heads (two decode ranks per head)', async () => {
  await run({ model: MHA8, prefill: tps(2), decode: tps(16), rooms: [ROOM] }, 'gather');
});

test('a decode ring smaller than one room: the room waits for space, then completes', async () => {
  // One decode page of every buffer is 6 × 4 tokens × 4 heads × 16 B = 1.5 KiB; each prefill rank stages 6 pages.
  const stats = await runScenario({
    model: MHA8,
    prefill: tps(4),
    decode: tps(2),
    decodeStaging: { ringBytes: 4096 },
    prefillStaging: { chunkBytes: 4096 },
    rooms: [ROOM, ROOM2],
    timeouts: TIMEOUTS,
  });
  expectRoute(stats, 'ring');
  assert.ok(
    stats.decode.every((d) => d !== null && d.capacity === 4096 && d.peak <= 4096),
    JSON.stringify(stats.decode),
  );
});

const LAYERWISE_HOW = { gather: 'gathered in staging', transport: 'gathered by the transport', scatter: 'written into the decode rows by the transport' };
for (const [model, route, p, d] of [
  [MHA8, 'gather', 2, 4],
  [WIDE, 'transport', 2, 4],
  [WIDER, 'scatter', 4, 2],
] as const)
  test(`layerwise with staging: TP ${p}→${d} NHD, each layer ${LAYERWISE_HOW[route]} and written when it is ready`, async () => {
    const port = await freePort();
    const ranks: RankProcess[] = [];
    try {
      const common = { model, bootstrapPort: port, timeouts: TIMEOUTS };
      const prefill = await Promise.all(tps(p).map((l) => spawnRank({ role: 'prefill', layout: l, layerwise: true, ...common })));
      ranks.push(...prefill);
      const decode = await Promise.all(tps(d).map((l) => spawnRank({ role: 'decode', layout: l, ...common })));
      ranks.push(...decode);
      // Rooms of one batch are filled at once: their source (and destination) pages must not overlap.
      const rooms = [ROOM, { ...ROOM2, srcPages: [0, 1, 5, 6] }];
      const receives = decode.map((d) => Promise.all(rooms.map((r) => d.call('receive', roomArgs(r.room, r.dstPages, r.auxDst)))));
      const batches = prefill.map((p) => p.call('batch', { rooms: rooms.map((r) => roomArgs(r.room, r.srcPages, r.auxSrc)) }));
      const [got, sent] = await Promise.all([Promise.all(receives), Promise.all(batches)]);
      for (const perRank of got) for (const x of perRank) assert.is(x.status, 4, `${x.code}: ${x.message}`);
      for (const b of sent) {
        assert.is(b.stats.layerwiseRooms, rooms.length, 'every room went layer by layer');
        for (const x of b.results) assert.is(x.status, 4, `${x.code}: ${x.message}`);
      }
      for (const d of decode) assert.equal(await d.call('verify'), { mismatch: null });
      const stats: ScenarioStats = { prefill: (await Promise.all(prefill.map((p) => p.call('stats')))) as ScenarioStats['prefill'], decode: [] };
      expectRoute(stats, route);
      // One staged write per layer (and per room and destination), not one for the whole room.
      const counter = ({ gather: 'gatherWrites', transport: 'transportGathers', scatter: 'transportScatters' } as const)[route];
      // Each prefill rank writes every layer to each decode rank it feeds (TP 2→4: two; TP 4→2: one).
      assert.ok(sum(stats, counter) >= rooms.length * model.totalLayers * Math.max(p, d), JSON.stringify(stats.prefill));
    } finally {
      await closeAll(ranks);
    }
  });

test('a decode killed while its ring holds a room: that room fails on the prefill, its staging comes back, a room to another decode completes', async () => {
  const port = await freePort();
  const ranks: RankProcess[] = [];
  try {
    const common = { model: MHA8, bootstrapPort: port, timeouts: TIMEOUTS };
    // Small chunks, so the room is many ring writes and scatters long.
    const prefill = await Promise.all(tps(2).map((l) => spawnRank({ role: 'prefill', layout: l, staging: { chunkBytes: 4096 }, ...common })));
    ranks.push(...prefill);
    const [d1, d2] = await Promise.all([0, 1].map(() => spawnRank({ role: 'decode', layout: layout(1, 0), ...common })));
    ranks.push(d1!, d2!);
    void d1!.call('receive', roomArgs(5n, ROOM.dstPages, 1)).catch(() => undefined);
    const doomed = prefill.map((p) => p.call('send', roomArgs(5n, ROOM.srcPages, 1, { chunks: 2, pauseMs: 1_000 })));
    await prefill[0]!.event('chunk');
    d1!.kill('SIGKILL');
    const results = await Promise.all(doomed);
    for (const r of results) {
      assert.is(r.status, 0);
      assert.ok(['CONNECTION_LOST', 'PEER_UNREACHABLE', 'PEER_FAILED', 'TIMEOUT', 'ABORTED'].includes(r.code!), `${r.code}: ${r.message}`);
    }
    const after = (await Promise.all(prefill.map((p) => p.call('stats')))) as StagingStats[]; // prefill ranks: their staging's stats
    assert.ok(
      after.every((s) => s.inUse === 0),
      `staging still held: ${JSON.stringify(after)}`,
    );
    const [ok, got] = await Promise.all([
      Promise.all(prefill.map((p) => p.call('send', roomArgs(6n, ROOM2.srcPages, 2)))),
      d2!.call('receive', roomArgs(6n, ROOM2.dstPages, 3)),
    ]);
    ok.forEach((x) => assert.is(x.status, 4, x.message));
    assert.is(got.status, 4, got.message);
    assert.is(got.mismatch, null);
  } finally {
    await closeAll(ranks);
  }
});

test.run();
