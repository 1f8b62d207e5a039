import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '@te/connector';
import { Checksummer, CopyList, StagingCopier, addressOf } from '../src/index.js';

function patterned(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (Math.imul(i, 2654435761) >>> 13) ^ seed;
  return b;
}

test('a head slice of NHD pages is gathered exactly, on several threads', async () => {
  const tokens = 64;
  const heads = 8;
  const headBytes = 32;
  const pages = 16;
  const src = patterned(pages * tokens * heads * headBytes, 3);
  const dst = new Uint8Array(pages * tokens * 2 * headBytes);
  const s = Number(addressOf(src));
  const d = Number(addressOf(dst));
  const copier = StagingCopier.create({ threads: 2 });
  copier.setRegions([
    { addr: s, length: src.length },
    { addr: d, length: dst.length },
  ]);
  const jobs = new CopyList();
  // Heads [5, 7) of every token row, packed.
  for (let p = 0; p < pages; p++)
    jobs.push(s + p * tokens * heads * headBytes + 5 * headBytes, d + p * tokens * 2 * headBytes, 2 * headBytes, tokens, heads * headBytes, 2 * headBytes);
  await copier.copy(jobs.finish());
  for (let p = 0; p < pages; p++)
    for (let t = 0; t < tokens; t++)
      for (let b = 0; b < 2 * headBytes; b++) {
        const want = src[(p * tokens + t) * heads * headBytes + 5 * headBytes + b];
        const got = dst[(p * tokens + t) * 2 * headBytes + b];
        if (want !== got) assert.unreachable(`page ${p} token ${t} byte ${b}: ${got} != ${want}`);
      }
});

test('a copy leaving the regions is refused with ADDRESS_OUT_OF_RANGE before any byte moves', async () => {
  const src = patterned(4096, 1);
  const dst = new Uint8Array(4096);
  const s = Number(addressOf(src));
  const d = Number(addressOf(dst));
  const copier = StagingCopier.create({ threads: 1 });
  copier.setRegions([
    { addr: s, length: 4096 },
    { addr: d, length: 4096 },
  ]);
  const jobs = new CopyList();
  jobs.push(s, d, 1024, 1, 1024, 1024); // fine on its own
  jobs.push(s, d + 3072, 2048, 1, 2048, 2048); // runs 1024 bytes past the destination
  const error = await copier.copy(jobs.finish()).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isTransferError(error), String(error));
  assert.is((error as { code: string }).code, 'ADDRESS_OUT_OF_RANGE');
  assert.ok(
    dst.every((b) => b === 0),
    'the first copy must not have run either',
  );
});

test('copies into memory never given as a region are refused', async () => {
  const copier = StagingCopier.create({ threads: 1 });
  const src = patterned(64, 1);
  copier.setRegions([{ addr: Number(addressOf(src)), length: 64 }]);
  const jobs = new CopyList();
  jobs.push(Number(addressOf(src)), 0x1000, 64, 1, 64, 64);
  const error = await copier.copy(jobs.finish()).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.is((error as { code: string }).code, 'ADDRESS_OUT_OF_RANGE');
});

test('malformed batches are INVALID_ARGUMENT', async () => {
  const copier = StagingCopier.create({ threads: 1 });
  copier.setRegions([]);
  const e1 = await copier.copy(new Float64Array(5)).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.is((e1 as { code: string }).code, 'INVALID_ARGUMENT');
  const e2 = await copier.copy(Float64Array.of(1.5, 0, 1, 1, 1, 1, 1, 0, 0)).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.is((e2 as { code: string }).code, 'INVALID_ARGUMENT');
  assert.throws(() => StagingCopier.create({ threads: 0 }), /threads/);
});

// A missing list threw a TypeError synchronously from these promise-returning calls.
test('copy and checksum without a job list reject with INVALID_ARGUMENT, not a synchronous TypeError', async () => {
  const copier = StagingCopier.create({ threads: 1 });
  const checksummer = Checksummer.create({ threads: 1 });
  for (const [call, message] of [
    [() => copier.copy(undefined as never), /Expected `jobs` to be a Float64Array$/],
    [() => copier.copy(null as never), /Expected `jobs` to be a Float64Array$/],
    [() => checksummer.checksum(undefined as never), /Expected `jobs` to be a Float64Array or a ChecksumList$/],
  ] as const) {
    let outcome: unknown;
    try {
      outcome = await call().then(
        () => 'resolved',
        (e: unknown) => e,
      );
    } catch (e) {
      outcome = `threw synchronously: ${String(e)}`;
    }
    assert.ok(isTransferError(outcome, 'INVALID_ARGUMENT'), String(outcome));
    assert.match((outcome as Error).message, message);
    assert.is((outcome as { plugin?: string }).plugin, '@te/staging');
  }
});

test.run();
