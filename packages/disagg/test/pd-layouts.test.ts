import { test } from 'uvu';
import { layout } from './pd-harness.js';
import { runScenario } from './pd-scenario.js';
import type { ModelSpec } from './fixtures/pd-model.js';

/*
 * Every prefill and decode rank is its own process over mooncake-tcp on loopback. KV bytes
 * are a function of (room, layer, global head, token, K/V, byte), so a misplaced head,
 * layer or page fails, and each decode rank's whole memory is compared with what its
 * rooms should have written: nothing outside the destination pages may change.
 */
const MHA: ModelSpec = { attention: 'mha', totalLayers: 4, heads: 8, headBytes: 16, pageSize: 4, pages: 24, auxSlots: 8, auxBytes: 64 };
const GQA2: ModelSpec = { ...MHA, heads: 2 };
const MLA: ModelSpec = { attention: 'mla', totalLayers: 4, heads: 1, headBytes: 64, pageSize: 4, pages: 24, auxSlots: 8, auxBytes: 64 };
// Non-contiguous on both sides, so page runs merge only partly.
const ROOM = { room: 0x1234_5678_9abcn, srcPages: [2, 3, 4, 9, 10, 17], dstPages: [5, 6, 7, 8, 1, 20], auxSrc: 1, auxDst: 6 };
const ROOM2 = { room: 0x7fff_ffff_ffff_fff1n, srcPages: [0, 1, 2, 3], dstPages: [10, 11, 12, 13], auxSrc: 2, auxDst: 3 };

const tps = (n: number, extra = {}) => Array.from({ length: n }, (_, i) => layout(n, i, extra));

test('TP 1→1', async () => {
  await runScenario({ model: MHA, prefill: tps(1), decode: tps(1), rooms: [ROOM, ROOM2] });
});

test("TP 2→4 (each decode rank takes half a prefill rank's heads)", async () => {
  await runScenario({ model: MHA, prefill: tps(2), decode: tps(4), rooms: [ROOM] });
});

test("TP 4→2 (each decode rank gathers two prefill ranks' heads)", async () => {
  await runScenario({ model: MHA, prefill: tps(4), decode: tps(2), rooms: [ROOM] });
});

test('GQA, 2 KV heads, TP 4→2 (replicated prefill heads: one sender per head)', async () => {
  await runScenario({ model: GQA2, prefill: tps(4), decode: tps(2), rooms: [ROOM] });
});

test('GQA, 2 KV heads, TP 2→4 (replicated decode heads)', async () => {
  await runScenario({ model: GQA2, prefill: tps(2), decode: tps(4), rooms: [ROOM] });
});

test('MLA, TP 4→2 (one real sender per decode rank, the others dummies)', async () => {
  await runScenario({ model: MLA, prefill: tps(4), decode: tps(2), rooms: [ROOM] });
});

test('PP 2 → PP 1 with TP 2→2 (each stage writes its own layers)', async () => {
  const prefill = [0, 1].flatMap((pp) => [0, 1].map((tp) => layout(2, tp, { ppSize: 2, ppRank: pp })));
  await runScenario({ model: MHA, prefill, decode: tps(2), rooms: [ROOM] });
});

test("DP 2 on both sides (room % dp and the router's choice)", async () => {
  const dp = (tp: number) => [0, 1].flatMap((d) => Array.from({ length: tp }, (_, i) => layout(tp, i, { attnDpSize: 2, attnDpRank: d })));
  await runScenario({
    model: MHA,
    prefill: dp(1),
    decode: dp(1),
    rooms: [
      { ...ROOM, room: 10n, decodeDp: 0 }, // prefill DP 0 (10 % 2)
      { ...ROOM2, room: 11n, decodeDp: 1 }, // prefill DP 1 (11 % 2)
      { ...ROOM2, room: 13n, decodeDp: 0, prefillDp: 0, dstPages: [14, 15, 16, 17] }, // router chose DP 0
    ],
  });
});

test('chunked prefill: 3 chunks, aux with the last', async () => {
  await runScenario({ model: MHA, prefill: tps(1), decode: tps(1), rooms: [{ ...ROOM, chunks: 3 }] });
});

test('Mamba state: one slot per request (TP 1→1 and TP 2→4 sliced)', async () => {
  const model: ModelSpec = { ...MHA, state: { kind: 'mamba', units: 4, unitBytes: 32, slots: 4 } };
  await runScenario({ model, prefill: tps(1), decode: tps(1), rooms: [{ ...ROOM, stateSrc: [1], stateDst: [3] }] });
  await runScenario({ model, prefill: tps(2), decode: tps(4), rooms: [{ ...ROOM, stateSrc: [2], stateDst: [0] }] });
});

test('SWA state: page-indexed', async () => {
  const model: ModelSpec = { ...MHA, state: { kind: 'swa', units: 1, unitBytes: 8, slots: 12 } };
  await runScenario({ model, prefill: tps(1), decode: tps(1), rooms: [{ ...ROOM, stateSrc: [4, 5, 9], stateDst: [0, 7, 8] }] });
});

test.run();
