// Gathered writes (TransferBatch.localRows): a write whose local bytes are strided rows goes
// out packed (rows under 4 KiB through the lane's packing buffer, wider ones one iovec per
// row), and the target receives them as an ordinary write. Checked against a target process
// (coalesced into WRITEV frames and not, and through a socket buffer far smaller than the
// packing buffer, so that sends stop inside a packed piece), and on the same-process path; a
// malformed or unregistered gather fails its own request before a byte is sent.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, NATIVE_STATUS, type TransferBatch } from '@te/connector';
import { hash, MiB, pattern, selfDescriptor, spawnTarget, withLocalTransport, type Local, type TargetProcess } from './helpers.js';

const SIZE = 8 * MiB;
let target: TargetProcess;
let base: bigint;

test.before(async () => {
  target = await spawnTarget(SIZE);
  base = BigInt(target.info.addr);
});
test.after(async () => {
  await target?.call('exit').catch(() => {});
});

/** One gathered write: `rows` rows of `width` bytes, `pitch` apart, from local offset `at`. */
interface Gather {
  at: number;
  rows: number;
  width: number;
  pitch: number;
  /** Where its packed bytes land, as an offset into the target's memory. */
  to: number;
}

/** The batch of gathers, and what the target's memory must hold after it (from `src`, the local bytes). */
function gatherBatch(local: Local, gathers: Gather[], src: Uint8Array): { batch: TransferBatch; expected: Uint8Array } {
  const b = allocateBatch(gathers.length);
  b.localRows = new Uint32Array(gathers.length);
  b.localPitches = new BigUint64Array(gathers.length);
  const expected = new Uint8Array(SIZE);
  gathers.forEach((g, i) => {
    b.opcodes[i] = 1;
    b.localAddrs[i] = local.addr + BigInt(g.at);
    b.remoteAddrs[i] = base + BigInt(g.to);
    b.lengths[i] = BigInt(g.rows * g.width);
    b.localRows![i] = g.rows;
    b.localPitches![i] = BigInt(g.pitch);
    for (let r = 0; r < g.rows; r++) expected.set(src.subarray(g.at + r * g.pitch, g.at + r * g.pitch + g.width), g.to + r * g.width);
  });
  return { batch: b, expected };
}

/** Bytes the lane packs before sending: the gathers of more than one row under 4 KiB. */
function narrowBytes(gathers: Gather[]): number {
  return gathers.filter((g) => g.rows > 1 && g.width < 4096).reduce((a, g) => a + g.rows * g.width, 0);
}

const rowsPacked = (local: Local) => Number(local.transport.describe?.()?.rowsPackedBytes);

/** Head slices of NHD pages (512-byte rows of 1 KiB tokens), odd shapes, and one gather of more rows than a writev takes. */
function shapes(): Gather[] {
  const out: Gather[] = [];
  let to = 0;
  const add = (at: number, rows: number, width: number, pitch: number) => {
    out.push({ at, rows, width, pitch, to });
    to += rows * width;
  };
  for (let page = 0; page < 40; page++) add(page * 64 * 1024 + 512, 64, 512, 1024); // the second half of each token
  for (let k = 0; k < 20; k++) add(3 * MiB + k * 7000, 5 + k, 3 + k * 11, 3 + k * 11 + 17); // odd widths and pitches
  add(4 * MiB, 3000, 16, 48); // 3000 rows: more iovecs than one writev carries
  add(5 * MiB, 2, 300 * 1024, 400 * 1024); // rows larger than a slice: a slice starts inside a row
  add(6 * MiB, 1, 4096, 4096); // rows 1: an ordinary write
  return out;
}

for (const coalesceWrites of [true, false]) {
  test(`gathered writes land packed and byte-exact at a target process (coalesceWrites: ${coalesceWrites})`, async () => {
    await target.call('zero');
    await withLocalTransport(SIZE, { coalesceWrites, sliceSize: 256 * 1024 }, async (local) => {
      const src = pattern(coalesceWrites ? 11 : 12, SIZE);
      local.buffer.set(src);
      const { batch, expected } = gatherBatch(local, shapes(), src);
      const peer = await local.transport.openPeer(target.descriptor);
      assert.is(rowsPacked(local), 0);
      const r = await local.transport.submit(peer, batch, { timeoutMs: 20_000 });
      assert.equal(Array.from(r.statuses), new Array(batch.opcodes.length).fill(0));
      assert.is(
        r.bytes,
        batch.lengths.reduce((a, l) => a + l, 0n),
      );
      // Every byte of the target: the packed rows where they were written, zeros elsewhere.
      assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(expected));
      // Narrow rows went through the packing buffer, each byte once; wide rows did not.
      assert.is(rowsPacked(local), narrowBytes(shapes()));
    });
  });
}

test('narrow rows land byte-exact when sends stop inside a packed piece (4 KiB socket buffers)', async () => {
  await target.call('zero');
  await withLocalTransport(SIZE, { socketBufferBytes: 4096, sliceSize: 1024 * 1024 }, async (local) => {
    const src = pattern(13, SIZE);
    local.buffer.set(src);
    // 3 MiB of 512-byte rows (half of every 1 KiB token row of 6 MiB), and 3 MiB of 96-byte rows 200 apart.
    const gathers: Gather[] = [
      { at: 512, rows: 6144, width: 512, pitch: 1024, to: 0 },
      { at: 0, rows: 32768, width: 96, pitch: 200, to: 3 * MiB },
    ];
    const { batch, expected } = gatherBatch(local, gathers, src);
    const peer = await local.transport.openPeer(target.descriptor);
    const r = await local.transport.submit(peer, batch, { timeoutMs: 20_000 });
    assert.equal(Array.from(r.statuses), [0, 0]);
    assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(expected));
    assert.is(rowsPacked(local), narrowBytes(gathers));
  });
});

test('a malformed or unregistered gather fails its own request; the others land', async () => {
  await target.call('zero');
  await withLocalTransport(2 * MiB, {}, async (local) => {
    const src = pattern(21, 2 * MiB);
    local.buffer.set(src);
    const good: Gather = { at: 0, rows: 8, width: 100, pitch: 256, to: 0 };
    const { batch } = gatherBatch(local, [good, good, good, good, good], src);
    const at = (i: number, g: Partial<Gather>, op = 1) => {
      const m = { ...good, ...g };
      batch.opcodes[i] = op;
      batch.localAddrs[i] = local.addr + BigInt(m.at);
      batch.lengths[i] = BigInt(m.rows * m.width);
      batch.localRows![i] = m.rows;
      batch.localPitches![i] = BigInt(m.pitch);
    };
    at(1, { at: 2 * MiB - 1000, rows: 8, pitch: 256 }); // the last rows lie past the registered memory
    at(2, { pitch: 50 }); // rows overlap
    at(3, {}, 0); // a read does not gather
    batch.lengths[4] = 801n; // not a whole number of rows
    const peer = await local.transport.openPeer(target.descriptor);
    const r = await local.transport.submit(peer, batch, { timeoutMs: 5000 });
    assert.is(r.statuses[0], 0);
    assert.is(r.statuses[1], NATIVE_STATUS.ADDRESS_OUT_OF_RANGE);
    assert.is(r.statuses[2], NATIVE_STATUS.INVALID_ARGUMENT);
    assert.is(r.statuses[3], NATIVE_STATUS.INVALID_ARGUMENT);
    assert.is(r.statuses[4], NATIVE_STATUS.INVALID_ARGUMENT);
    const expected = new Uint8Array(800);
    for (let row = 0; row < 8; row++) expected.set(src.subarray(row * 256, row * 256 + 100), row * 100);
    assert.is(await target.call('hash', { offset: 0, length: 800 }), hash(expected));
    assert.is(await target.call('hash', { offset: 800, length: SIZE - 800 }), hash(new Uint8Array(SIZE - 800)), 'nothing else was written');
  });
});

test('the same-process path gathers rows as the wire does', async () => {
  await withLocalTransport(SIZE, {}, async (local) => {
    const peer = await local.transport.openPeer(selfDescriptor(local, target.descriptor));
    const src = pattern(31, 4 * MiB);
    local.buffer.set(src);
    const b = allocateBatch(1);
    b.opcodes[0] = 1;
    b.localAddrs[0] = local.addr + 512n;
    b.remoteAddrs[0] = local.addr + BigInt(6 * MiB);
    b.lengths[0] = BigInt(1000 * 512);
    b.localRows = Uint32Array.of(1000);
    b.localPitches = BigUint64Array.of(1024n);
    const r = await local.transport.submit(peer, b, { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [0]);
    const expected = new Uint8Array(1000 * 512);
    for (let row = 0; row < 1000; row++) expected.set(src.subarray(512 + row * 1024, 512 + row * 1024 + 512), row * 512);
    assert.ok(Buffer.from(local.buffer.buffer, 6 * MiB, expected.length).equals(expected));
  });
});

test.run();
