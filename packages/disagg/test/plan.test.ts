import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  identityPairs,
  kvBufferPairs,
  mergePageRuns,
  planCopy,
  planShardSlices,
  planTargets,
  prefillDpRankFor,
  resolveRankTargets,
  shardOfRank,
  targetPrefillPpRanks,
  targetPrefillTpRanks,
  slicesCover,
  type BufferTable,
} from '../src/index.js';
import type { KVBuffers } from '@te/connector';

const u32 = (...v: number[]) => Uint32Array.from(v);

test('mergePageRuns: runs contiguous on both sides only', () => {
  // runs: (source page, destination page, length) of each run, flattened.
  const table: { src: number[]; dst: number[]; runs: number[]; why?: string }[] = [
    { src: [], dst: [], runs: [] },
    { src: [5], dst: [9], runs: [5, 9, 1] },
    { src: [1, 2, 3, 4], dst: [10, 11, 12, 13], runs: [1, 10, 4] },
    { src: [1, 2, 3, 4], dst: [10, 11, 20, 21], runs: [1, 10, 2, 3, 20, 2], why: 'destination breaks' },
    { src: [1, 2, 5, 6], dst: [10, 11, 12, 13], runs: [1, 10, 2, 5, 12, 2], why: 'source breaks' },
    { src: [3, 2, 1], dst: [1, 2, 3], runs: [3, 1, 1, 2, 2, 1, 1, 3, 1], why: 'descending source never merges' },
    { src: [7, 8, 9, 9], dst: [0, 1, 2, 3], runs: [7, 0, 3, 9, 3, 1] },
  ];
  for (const { src, dst, runs, why } of table) {
    const r = mergePageRuns(u32(...src), u32(...dst));
    const what = `${src} → ${dst}${why ? ` (${why})` : ''}`;
    assert.is(r.count, runs.length / 3, what);
    assert.equal(
      [...r.src].flatMap((s, i) => [s, r.dst[i], r.len[i]]),
      runs,
      what,
    );
  }
  assert.throws(() => mergePageRuns(u32(1), u32()), /differ in length/);
});

test('shardOfRank: heads per rank, GQA replication when TP exceeds the heads', () => {
  const table: [number, number, number, number, number][] = [
    // total, tp, rank → first, count
    [8, 1, 0, 0, 8],
    [8, 2, 1, 4, 4],
    [8, 4, 3, 6, 2],
    [2, 4, 0, 0, 1],
    [2, 4, 1, 0, 1],
    [2, 4, 2, 1, 1],
    [2, 4, 3, 1, 1],
    [4, 8, 5, 2, 1],
  ];
  for (const [total, tp, rank, first, count] of table) assert.equal(shardOfRank(total, tp, rank), { first, count }, `${total} heads tp=${tp} rank=${rank}`);
  assert.throws(() => shardOfRank(6, 4, 0), /divide evenly|multiple/);
  assert.throws(() => shardOfRank(8, 2, 2), /outside/);
});

test('planShardSlices: each destination head sent by exactly one source rank', () => {
  // want: (srcOffset, dstOffset, count) of each source rank's slice, flattened.
  const table: { total: number; src: number; dst: number; rank: number; sources: number[]; want: number[] }[] = [
    // decode TP < prefill TP: gather
    { total: 8, src: 4, dst: 2, rank: 1, sources: [2, 3], want: [0, 0, 2, 0, 2, 2] },
    // decode TP > prefill TP: a slice of one prefill rank
    { total: 8, src: 2, dst: 4, rank: 3, sources: [1], want: [2, 0, 2] },
    // GQA 2 heads, 4→2: ranks 0,1 both hold head 0: rank 1 is a dummy
    { total: 2, src: 4, dst: 2, rank: 0, sources: [0, 1], want: [0, 0, 1, 0, 0, 0] },
    { total: 2, src: 4, dst: 2, rank: 1, sources: [2, 3], want: [0, 0, 1, 0, 0, 0] },
    // GQA 2 heads, 2→4: decode ranks 2 and 3 both need head 1 from prefill rank 1
    { total: 2, src: 2, dst: 4, rank: 2, sources: [1], want: [0, 0, 1] },
    { total: 2, src: 2, dst: 4, rank: 3, sources: [1], want: [0, 0, 1] },
    // equal TP
    { total: 8, src: 2, dst: 2, rank: 1, sources: [1], want: [0, 0, 4] },
  ];
  for (const c of table) {
    const s = planShardSlices(c.total, c.src, c.dst, c.rank, c.sources);
    assert.equal(
      s.flatMap((x) => [x.srcOffset, x.dstOffset, x.count]),
      c.want,
      JSON.stringify(c),
    );
    assert.ok(slicesCover(c.total, c.dst, c.rank, s));
  }
  assert.not.ok(slicesCover(8, 2, 0, planShardSlices(8, 4, 2, 0, [0])), 'one of two needed prefill ranks does not cover');
});

test('rank targets: equal, decode TP > prefill TP, decode TP < prefill TP, PP, DP', () => {
  const t = (ptp: number, dtp: number, rank: number, ppp = 1, dpp = 1, dppRank = 0) =>
    resolveRankTargets({ tpSize: ptp, ppSize: ppp, dpSize: 1 }, { tpSize: dtp, tpRank: rank, ppSize: dpp, ppRank: dppRank });
  assert.equal([...t(2, 2, 1).tpRanks], [1]);
  assert.equal([...t(2, 4, 3).tpRanks], [1]);
  assert.is(t(2, 4, 3).decodeRanksPerPrefillRank, 2);
  assert.equal([...t(4, 2, 1).tpRanks], [2, 3]);
  assert.is(t(4, 2, 1).decodeRanksPerPrefillRank, 1);
  assert.equal([...t(2, 2, 0, 2, 1).ppRanks], [0, 1]);
  assert.equal([...t(2, 2, 0, 2, 2, 1).ppRanks], [1]);
  assert.throws(() => t(2, 2, 0, 4, 2), /PP size/);
  assert.throws(() => t(4, 3, 0), /multiple/);
  assert.is(prefillDpRankFor(11n, 2), 1);
  assert.is(prefillDpRankFor((1n << 62n) + 4n, 4), 0);
  assert.is(prefillDpRankFor(11n, 2, 0), 0);
  assert.throws(() => prefillDpRankFor(1n, 2, 2), /outside/);
});

test('rank targets refuse sizes and ranks that name no rank, by name, instead of returning a rank list', () => {
  // Before, a decode rank of -1 or 9 (of 4) mapped to prefill rank 0 or 4, a PP size of 0 to no
  // stage, a DP size of 0 threw "Division by zero", and a room given as a number a TypeError.
  const refused: [() => unknown, RegExp][] = [
    [() => targetPrefillTpRanks(2, 4, -1), /^decode TP rank -1 is outside \[0, 4\)$/],
    [() => targetPrefillTpRanks(2, 4, 9), /^decode TP rank 9 is outside \[0, 4\)$/],
    [() => targetPrefillTpRanks(0, 2, 0), /^prefill TP size must be a positive integer, got 0$/],
    [() => targetPrefillTpRanks(2.5, 4, 0), /^prefill TP size must be a positive integer, got 2.5$/],
    [() => targetPrefillTpRanks(2, NaN, 0), /^decode TP size must be a positive integer, got NaN$/],
    [() => targetPrefillPpRanks(0, 1, 0), /^prefill PP size must be a positive integer, got 0$/],
    [() => targetPrefillPpRanks(2, 2, 2), /^decode PP rank 2 is outside \[0, 2\)$/],
    [() => resolveRankTargets(undefined as never, undefined as never), /^the prefill shape must be an object, got undefined$/],
    [() => resolveRankTargets({ tpSize: 2, ppSize: 1, dpSize: 1 }, null as never), /^the decode rank's shape must be an object, got null$/],
    [() => prefillDpRankFor(5n, 0), /^prefill DP size must be a positive integer, got 0$/],
    [() => prefillDpRankFor(5 as never, 2), /^a bootstrap room must be a non-negative bigint, got number 5$/],
    [() => prefillDpRankFor(-1n, 2), /^a bootstrap room must be a non-negative bigint, got bigint -1$/],
    [() => prefillDpRankFor(1n, 2, 0.5), /^prefill DP rank 0.5 is outside \[0, 2\)$/],
  ];
  for (const [call, message] of refused) {
    let error: unknown;
    try {
      call();
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof RangeError, `${call}: expected a RangeError, got ${String(error)}`);
    assert.match((error as Error).message, message);
  }
});

const buffers = (over: Partial<KVBuffers> = {}): KVBuffers => {
  const g = { addrs: new BigUint64Array(0), lengths: new BigUint64Array(0), itemLengths: new BigUint64Array(0) };
  return { kv: g, aux: g, attention: 'mha', numLayers: 4, pageSize: 4, kvCacheDtype: 'fp16', device: 'cpu', totalKvHeads: 8, ...over };
};
const info = (ptp: number, extra = {}) => ({
  attn_tp_size: ptp,
  dp_size: 1,
  pp_size: 1,
  page_size: 4,
  kv_cache_dtype: 'fp16',
  attention: 'mha' as const,
  num_layers: 4,
  total_kv_heads: 8,
  ...extra,
});
const lay = (tp: number, rank: number) => ({
  attnTpSize: tp,
  attnTpRank: rank,
  attnDpSize: 1,
  attnDpRank: 0,
  ppSize: 1,
  ppRank: 0,
  systemDpSize: 1,
  systemDpRank: 0,
});

test('planTargets: MLA dummies, head slices, aux from the last stage only', () => {
  const mla = planTargets(info(4, { attention: 'mla' }), lay(2, 1), buffers({ attention: 'mla' }), 5n);
  assert.equal(
    mla.targets.map((t) => [t.tpRank, t.dummy, t.sendsAux]),
    [
      [2, false, true],
      [3, true, false],
    ],
  );
  const gather = planTargets(info(4), lay(2, 0), buffers(), 5n);
  assert.equal(
    gather.targets.map((t) => [t.tpRank, t.kvSlice?.dstOffset, t.kvSlice?.count, t.dummy]),
    [
      [0, 0, 2, false],
      [1, 2, 2, false],
    ],
  );
  const pp = planTargets(info(2, { pp_size: 2 }), lay(2, 1), buffers(), 5n);
  assert.equal(
    pp.targets.map((t) => [t.ppRank, t.tpRank, t.sendsAux]),
    [
      [0, 1, false],
      [1, 1, true],
    ],
  );
  assert.throws(() => planTargets(info(4, { total_kv_heads: undefined }), lay(2, 0), buffers({ totalKvHeads: undefined }), 1n), /totalKvHeads/);
  assert.throws(() => planTargets(info(4), lay(2, 0), buffers({ state: { ...buffers().kv, kind: 'swa' } }), 1n), /SWA/);
});

const table = (addrs: number[], len: number, item: number): BufferTable => ({
  addrs: Float64Array.from(addrs),
  lengths: Float64Array.from(addrs.map(() => len)),
  itemLens: Float64Array.from(addrs.map(() => item)),
});
const rows = (batch: { localAddrs: BigUint64Array; remoteAddrs: BigUint64Array; lengths: BigUint64Array }) =>
  [...batch.localAddrs].map((l, i) => [Number(l), Number(batch.remoteAddrs[i]), Number(batch.lengths[i])]);

test('planCopy: one descriptor per run per buffer pair; sliced rows at head offsets', () => {
  const src = table([1000, 5000], 4 * 64, 64);
  const dst = table([90000, 99000], 8 * 64, 64);
  const whole = planCopy({ src, dst, bufferPairs: identityPairs(2), srcItems: u32(0, 1, 3), dstItems: u32(4, 5, 6) });
  assert.is(whole.descriptorsBefore, 6);
  assert.equal(rows(whole.batch), [
    [1000, 90256, 128],
    [1192, 90384, 64],
    [5000, 99256, 128],
    [5192, 99384, 64],
  ]);
  assert.is(whole.bytes, 384);
  // 2 rows per item; 4 source heads × 8 bytes, 2 destination heads: heads 2..3 → 0..1
  const s = planCopy({
    src: table([0], 4 * 64, 64),
    dst: table([10000], 4 * 32, 32),
    bufferPairs: identityPairs(1),
    srcItems: u32(1),
    dstItems: u32(2),
    slice: { rows: 2, srcUnits: 4, dstUnits: 2, srcOffset: 2, dstOffset: 0, count: 2 },
  });
  assert.equal(rows(s.batch), [
    [64 + 16, 10064, 16],
    [64 + 32 + 16, 10064 + 16, 16],
  ]);
  assert.throws(() => planCopy({ src, dst, bufferPairs: identityPairs(1), srcItems: u32(4), dstItems: u32(0) }), /outside buffer/);
  assert.throws(() => planCopy({ src, dst, bufferPairs: identityPairs(1), srcItems: u32(0), dstItems: u32(8) }), /outside buffer/);
  assert.throws(() => planCopy({ src, dst: table([1], 512, 32), bufferPairs: identityPairs(1), srcItems: u32(0), dstItems: u32(0) }), /item lengths differ/);
});

test('planCopy: addresses above 2^32 are exact (u64 written through 32-bit halves)', () => {
  const hi = 0x7f12_3456_7000; // a typical user-space address
  const p = planCopy({
    src: table([hi], 1 << 20, 4096),
    dst: table([hi * 2], 1 << 20, 4096),
    bufferPairs: identityPairs(1),
    srcItems: u32(3),
    dstItems: u32(255),
  });
  assert.is(p.batch.localAddrs[0], BigInt(hi + 3 * 4096));
  assert.is(p.batch.remoteAddrs[0], BigInt(hi * 2 + 255 * 4096));
  assert.is(p.batch.lengths[0], 4096n);
});

test("kvBufferPairs: MHA K and V halves, PP stage into the decode's layer slice", () => {
  assert.equal([...kvBufferPairs('mha', { firstLayer: 0, layers: 2 }, { firstLayer: 0, layers: 2 })], [0, 0, 2, 2, 1, 1, 3, 3]);
  // prefill stage holds layers 2..3, decode holds all 4: K_2→K_2 (index 2), V_2 → 4+2
  assert.equal([...kvBufferPairs('mha', { firstLayer: 2, layers: 2 }, { firstLayer: 0, layers: 4 })], [0, 2, 2, 6, 1, 3, 3, 7]);
  assert.equal([...kvBufferPairs('mla', { firstLayer: 2, layers: 2 }, { firstLayer: 0, layers: 4 })], [0, 2, 1, 3]);
  assert.throws(() => kvBufferPairs('mha', { firstLayer: 2, layers: 2 }, { firstLayer: 0, layers: 2 }), /not held by the decode/);
});

test.run();
