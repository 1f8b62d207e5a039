import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  directBatch,
  gatherCopies,
  offsetOf,
  packedBatch,
  pageRowsBatch,
  planSliceCopy,
  routeOf,
  scatterCopies,
  stagedBatch,
  type CopySink,
  type PageGeometry,
  type PieceSet,
} from '../src/index.js';
import type { TransferBatch } from '@te/connector';

/*
 * The staging planner against a byte-by-byte reference, in one JS "address space" (a
 * Uint8Array, addresses are offsets): for every layout pair, head slice and page multiple,
 * the direct descriptors, the gather + staged write, and the gather + ring scatter must
 * each leave the destination exactly as copying element by element would, and touch no
 * other byte.
 */
const HB = 4;

/** Executes strided copies in JS. */
class JsCopies implements CopySink {
  constructor(private readonly mem: Uint8Array) {}
  push(src: number, dst: number, width: number, rows: number, srcPitch: number, dstPitch: number, reps: number, srcRep: number, dstRep: number): void {
    for (let r = 0; r < reps; r++)
      for (let i = 0; i < rows; i++)
        this.mem.copyWithin(dst + r * dstRep + i * dstPitch, src + r * srcRep + i * srcPitch, src + r * srcRep + i * srcPitch + width);
  }
}

/** Executes a write batch in JS, gathering `localRows` rows `localPitches` apart where it has them. */
function applyBatch(mem: Uint8Array, b: TransferBatch): void {
  for (let i = 0; i < b.lengths.length; i++) {
    const rows = b.localRows?.[i] ?? 1;
    const width = Number(b.lengths[i]) / rows;
    const pitch = rows > 1 ? Number(b.localPitches![i]) : width;
    for (let r = 0; r < rows; r++) {
      const l = Number(b.localAddrs[i]) + r * pitch;
      mem.copyWithin(Number(b.remoteAddrs[i]) + r * width, l, l + width);
    }
  }
}

interface Case {
  src: PageGeometry;
  dst: PageGeometry;
  slice: { srcOffset: number; dstOffset: number; count: number };
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const sl of ['NHD', 'HND'] as const)
    for (const dl of ['NHD', 'HND'] as const)
      for (const [sh, dh, so, doff, count] of [
        [4, 4, 0, 0, 4], // equal TP
        [4, 2, 2, 0, 2], // TP 2→4: half a source rank's heads
        [2, 4, 0, 2, 2], // TP 4→2: one source rank fills half a destination rank
        [1, 2, 0, 1, 1],
        [8, 1, 5, 0, 1], // GQA: one head
      ] as const)
        for (const m of [1, 2, 4])
          out.push({
            src: { tokens: 3, heads: sh, headBytes: HB, layout: sl },
            dst: { tokens: 3 * m, heads: dh, headBytes: HB, layout: dl },
            slice: { srcOffset: so, dstOffset: doff, count },
          });
  return out;
}

const SRC = 0;
const PAGES = 5;

function setup(c: Case) {
  const srcItem = c.src.tokens * c.src.heads * HB;
  const dstItem = c.dst.tokens * c.dst.heads * HB;
  const perDst = c.dst.tokens / c.src.tokens;
  const buffers = 2;
  const srcBytes = srcItem * PAGES;
  const dstPagesHeld = 6;
  const dstBytes = dstItem * dstPagesHeld;
  const dstBase = SRC + buffers * srcBytes + 64;
  const image = dstBase + buffers * dstBytes + 64;
  const mem = new Uint8Array(image + (1 << 16));
  for (let i = 0; i < buffers * srcBytes; i++) mem[SRC + i] = (i * 7 + 3) & 0xff || 1;
  const table = (base: number, len: number, item: number) => ({
    addrs: Float64Array.of(base, base + len),
    lengths: Float64Array.of(len, len),
    itemLens: Float64Array.of(item, item),
  });
  const srcPages = Uint32Array.of(4, 0, 1, 2);
  const dstPages = Uint32Array.from([5, 1, 2, 0].slice(0, Math.ceil(srcPages.length / perDst)));
  const copy = planSliceCopy(c.src, c.dst, c.slice);
  const set: PieceSet = {
    src: table(SRC, srcBytes, srcItem),
    dst: table(dstBase, dstBytes, dstItem),
    pairs: Int32Array.of(0, 0, 1, 1),
    srcPages,
    firstPage: 0,
    dstPages,
    perDst,
    copy,
  };
  // Reference: element by element.
  const want = mem.slice();
  for (let b = 0; b < buffers; b++)
    srcPages.forEach((sp, k) => {
      const dPage = dstPages[Math.floor(k / perDst)]!;
      const sub = k % perDst;
      for (let t = 0; t < c.src.tokens; t++)
        for (let h = 0; h < c.slice.count; h++) {
          const s = SRC + b * srcBytes + sp * srcItem + offsetOf(c.src, t, c.slice.srcOffset + h);
          const d = dstBase + b * dstBytes + dPage * dstItem + offsetOf(c.dst, sub * c.src.tokens + t, c.slice.dstOffset + h);
          want.copyWithin(d, s, s + HB);
        }
    });
  return { mem, want, set, image };
}

const label = (c: Case) => `${c.src.layout}→${c.dst.layout} heads ${c.src.heads}→${c.dst.heads} slice ${JSON.stringify(c.slice)} dst tokens ${c.dst.tokens}`;

/** The pieces of a case in two chunks, [from, to) each, as the stager cuts them. */
function twoChunks(set: PieceSet): [number, number][] {
  const total = (set.pairs.length / 2) * set.srcPages.length;
  return [
    [0, 3],
    [3, total],
  ];
}

/** The decode's scatter plan: from its own geometry, a source laid out like itself. */
function ringSideOf(c: Case) {
  return planSliceCopy({ tokens: c.src.tokens, heads: c.slice.count, headBytes: HB, layout: c.dst.layout }, c.dst, {
    srcOffset: 0,
    dstOffset: c.slice.dstOffset,
    count: c.slice.count,
  });
}

test('direct descriptors land every head slice exactly, for every layout pair and page multiple', () => {
  for (const c of cases()) {
    const { mem, want, set } = setup(c);
    applyBatch(mem, directBatch(set).finish());
    assert.ok(Buffer.compare(mem, want) === 0, label(c));
  }
});

test('gather into staging, then the staged write, where the destination piece is one range', () => {
  let n = 0;
  for (const c of cases()) {
    const { mem, want, set, image } = setup(c);
    if (!set.copy.dstContiguous) continue;
    n++;
    for (const [from, to] of twoChunks(set)) {
      gatherCopies(set, new JsCopies(mem), image, from, to, new Float64Array(2));
      applyBatch(mem, stagedBatch(set, image, from, to).finish());
    }
    mem.fill(0, image); // the staging memory is not part of the destination
    want.fill(0, image);
    assert.ok(Buffer.compare(mem, want) === 0, label(c));
  }
  assert.ok(n > 10, `${n} cases`);
});

test('gather, ring write and scatter land the same bytes for every case (the ring route)', () => {
  for (const c of cases()) {
    const { mem, want, set, image } = setup(c);
    const total = (set.pairs.length / 2) * set.srcPages.length;
    gatherCopies(set, new JsCopies(mem), image, 0, total, new Float64Array(2));
    const ringSide = ringSideOf(c);
    assert.is(ringSide.bytes, set.copy.bytes);
    scatterCopies({ ...set, copy: ringSide }, new JsCopies(mem), image, 0, total, new Float64Array(2));
    mem.fill(0, image);
    want.fill(0, image);
    assert.ok(Buffer.compare(mem, want) === 0, label(c));
  }
});

test('ring route without a gather: whole source ranges written straight into the ring image, then scattered', () => {
  let n = 0;
  for (const c of cases()) {
    const { mem, want, set, image } = setup(c);
    if (!set.copy.srcContiguous) continue;
    n++;
    const ringSide = ringSideOf(c);
    // Each chunk at its own place in the ring.
    for (const [from, to] of twoChunks(set)) {
      const at = image + from * set.copy.bytes;
      applyBatch(mem, packedBatch(set, at, from, to).finish());
      scatterCopies({ ...set, copy: ringSide }, new JsCopies(mem), at, from, to, new Float64Array(2));
    }
    mem.fill(0, image);
    want.fill(0, image);
    assert.ok(Buffer.compare(mem, want) === 0, label(c));
  }
  assert.ok(n > 10, `${n} cases`);
});

test('routes: HND both sides is direct at equal page size; NHD slices gather; interleaved slices need the ring', () => {
  const g = (layout: 'NHD' | 'HND', heads: number, tokens = 64): PageGeometry => ({ tokens, heads, headBytes: 256, layout });
  assert.is(routeOf(planSliceCopy(g('HND', 4), g('HND', 2), { srcOffset: 2, dstOffset: 0, count: 2 })), 'direct');
  assert.is(routeOf(planSliceCopy(g('HND', 2), g('HND', 4), { srcOffset: 0, dstOffset: 2, count: 2 })), 'direct');
  assert.is(routeOf(planSliceCopy(g('NHD', 4), g('NHD', 2), { srcOffset: 2, dstOffset: 0, count: 2 })), 'gather');
  assert.is(routeOf(planSliceCopy(g('NHD', 2), g('NHD', 4), { srcOffset: 0, dstOffset: 2, count: 2 })), 'ring');
  assert.is(routeOf(planSliceCopy(g('NHD', 2), g('HND', 4), { srcOffset: 0, dstOffset: 2, count: 2 })), 'gather');
  assert.is(routeOf(planSliceCopy(g('NHD', 8), g('NHD', 8), { srcOffset: 0, dstOffset: 0, count: 8 })), 'direct');
  assert.is(routeOf(planSliceCopy(g('NHD', 8), g('NHD', 8, 128), { srcOffset: 0, dstOffset: 0, count: 8 })), 'direct');
  assert.is(routeOf(planSliceCopy(g('HND', 8), g('HND', 8, 128), { srcOffset: 0, dstOffset: 0, count: 8 })), 'ring');
  assert.throws(() => planSliceCopy(g('NHD', 4), g('NHD', 4, 96), { srcOffset: 0, dstOffset: 0, count: 4 }), /multiple/);
  assert.throws(() => planSliceCopy(g('NHD', 4), g('NHD', 2), { srcOffset: 3, dstOffset: 0, count: 2 }), /exceeds/);
});

test('direct pieces as gathered page rows land every head slice exactly, and without gathers are the direct descriptors', () => {
  let n = 0;
  for (const c of cases()) {
    const { mem, want, set } = setup(c);
    if (routeOf(set.copy) !== 'direct') continue;
    n++;
    const plain = pageRowsBatch(set, false);
    assert.equal(plain.lengths, directBatch(set).finish().lengths, label(c));
    assert.is(plain.localRows, undefined);
    for (const [from, to] of twoChunks(set)) applyBatch(mem, pageRowsBatch(set, true, from, to));
    assert.ok(Buffer.compare(mem, want) === 0, label(c));
  }
  assert.ok(n >= 10, `${n} cases`);
});

test('HND head slices of consecutive pages landing in a run of destination pages are one request of rows', () => {
  // TP 2→4, HND: each source page holds 4 heads, a decode rank takes 2 (half of each page).
  const src: PageGeometry = { tokens: 4, heads: 4, headBytes: 8, layout: 'HND' };
  const dst: PageGeometry = { tokens: 4, heads: 2, headBytes: 8, layout: 'HND' };
  const copy = planSliceCopy(src, dst, { srcOffset: 2, dstOffset: 0, count: 2 });
  const sItem = 4 * 4 * 8;
  const dItem = 4 * 2 * 8;
  const set: PieceSet = {
    src: { addrs: Float64Array.of(0), lengths: Float64Array.of(sItem * 16), itemLens: Float64Array.of(sItem) },
    dst: { addrs: Float64Array.of(1 << 20), lengths: Float64Array.of(dItem * 16), itemLens: Float64Array.of(dItem) },
    pairs: Int32Array.of(0, 0),
    srcPages: Uint32Array.of(0, 1, 2, 3, 9),
    firstPage: 0,
    dstPages: Uint32Array.of(4, 5, 6, 1, 3),
    perDst: 1,
    copy,
  };
  const b = pageRowsBatch(set, true);
  // Pages 0-2 → 4-6 stride through the source and follow one another at the destination; 3 → 1 and 9 → 3 do not.
  assert.equal([...b.lengths].map(Number), [3 * dItem, dItem, dItem]);
  assert.equal([...b.localRows!], [3, 1, 1]);
  assert.equal([...b.localPitches!].map(Number).slice(0, 1), [sItem]);
  assert.equal(Number(b.localAddrs[0]), dItem); // heads 2-3 of page 0: half a source page in
  assert.is(directBatch(set).finish().lengths.length, 5);
});

test('gathered page rows stay within one buffer pair, even where the next buffer continues the stride', () => {
  // Two layer buffers back to back on each side, every page of each: the stride runs on
  // from buffer 0's last page into buffer 1's first, but a request spanning two registered
  // buffers is not one the transport can check, so the rows stop at the buffer.
  const src: PageGeometry = { tokens: 4, heads: 4, headBytes: 8, layout: 'HND' };
  const dst: PageGeometry = { tokens: 4, heads: 2, headBytes: 8, layout: 'HND' };
  const sItem = 4 * 4 * 8;
  const dItem = 4 * 2 * 8;
  const set: PieceSet = {
    src: { addrs: Float64Array.of(0, 4 * sItem), lengths: Float64Array.of(4 * sItem, 4 * sItem), itemLens: Float64Array.of(sItem, sItem) },
    dst: { addrs: Float64Array.of(1 << 20, (1 << 20) + 4 * dItem), lengths: Float64Array.of(4 * dItem, 4 * dItem), itemLens: Float64Array.of(dItem, dItem) },
    pairs: Int32Array.of(0, 0, 1, 1),
    srcPages: Uint32Array.of(0, 1, 2, 3),
    firstPage: 0,
    dstPages: Uint32Array.of(0, 1, 2, 3),
    perDst: 1,
    copy: planSliceCopy(src, dst, { srcOffset: 0, dstOffset: 0, count: 2 }),
  };
  const b = pageRowsBatch(set, true);
  assert.equal([...b.localRows!], [4, 4]);
  assert.equal([...b.localAddrs].map(Number), [0, 4 * sItem]);
});

test('direct descriptors merge across pages contiguous on both sides', () => {
  const g = (heads: number): PageGeometry => ({ tokens: 4, heads, headBytes: 8, layout: 'NHD' });
  const item = 4 * 4 * 8;
  const table = { addrs: Float64Array.of(0), lengths: Float64Array.of(item * 16), itemLens: Float64Array.of(item) };
  const dst = { addrs: Float64Array.of(1 << 20), lengths: Float64Array.of(item * 16), itemLens: Float64Array.of(item) };
  const copy = planSliceCopy(g(4), g(4), { srcOffset: 0, dstOffset: 0, count: 4 });
  const set: PieceSet = {
    src: table,
    dst,
    pairs: Int32Array.of(0, 0),
    srcPages: Uint32Array.of(0, 1, 2, 7),
    firstPage: 0,
    dstPages: Uint32Array.of(3, 4, 5, 6),
    perDst: 1,
    copy,
  };
  const b = directBatch(set).finish();
  assert.equal([...b.lengths].map(Number), [3 * item, item]);
});

test.run();
