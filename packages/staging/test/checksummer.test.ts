import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '@te/connector';
import { ChecksumList, Checksummer, addressOf, crc32cHardware } from '../src/index.js';

function patterned(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (Math.imul(i, 2654435761) >>> 13) ^ seed;
  return b;
}

test('CRC32C of the check string, of ranges and of a strided head slice, on native threads', async () => {
  const text = new TextEncoder().encode('123456789');
  const page = patterned(16 * 8 * 32, 5);
  const t = Number(addressOf(text));
  const p = Number(addressOf(page));
  const sums = Checksummer.create({ threads: 2 });
  sums.setRegions([
    { addr: t, length: text.length },
    { addr: p, length: page.length },
  ]);
  const jobs = new ChecksumList();
  jobs.push(t, 9);
  // Heads [3, 5) of 16 NHD token rows of 8 heads × 32 B, and the same bytes packed by hand.
  jobs.push(p + 3 * 32, 64, 16, 8 * 32);
  jobs.push(t, 0);
  const got = await sums.checksum(jobs);
  assert.is(got.length, 3);
  assert.is(got[0], 0xe3069283, `CRC32C("123456789") on the ${crc32cHardware() ? 'instruction' : 'table'} path`);
  assert.is(got[2], 0);
  const packed = new Uint8Array(16 * 64);
  for (let r = 0; r < 16; r++) packed.set(page.subarray(r * 256 + 96, r * 256 + 160), r * 64);
  const pk = Number(addressOf(packed));
  sums.setRegions([{ addr: pk, length: packed.length }]);
  const again = await sums.checksum(Float64Array.of(pk, packed.length, 1, packed.length, 1, 0));
  assert.is(again[0], got[1]);
  // One byte of the slice flipped changes its CRC.
  packed[100]! ^= 1;
  assert.is.not((await sums.checksum(Float64Array.of(pk, packed.length, 1, packed.length, 1, 0)))[0], got[1]);
});

test('a checksum leaving the regions is refused with ADDRESS_OUT_OF_RANGE before any byte is read', async () => {
  const mem = patterned(4096, 1);
  const m = Number(addressOf(mem));
  const sums = Checksummer.create({ threads: 1 });
  sums.setRegions([{ addr: m, length: 4096 }]);
  const jobs = new ChecksumList();
  jobs.push(m, 4096);
  jobs.push(m + 4000, 200);
  const error = await sums.checksum(jobs).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isTransferError(error, 'ADDRESS_OUT_OF_RANGE'), String(error));
  assert.match((error as Error).message, /checksum 1/);
  const bad = await sums.checksum(new Float64Array(5)).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isTransferError(bad, 'INVALID_ARGUMENT'), String(bad));
});

test.run();
