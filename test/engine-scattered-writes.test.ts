// Scattered writes through the engine (TransferBatch.remoteRows): checked in TypeScript before
// any transport sees them, carried by a transport that declares `scatterWrites`, refused with
// UNSUPPORTED_CAPABILITY by one that does not (a third party's plugin), and asked about
// beforehand with `scattersWrites`.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, batchOf, isTransferError, type TransferBatch } from '@te/connector';
import { thirdPartyPluginConfig, withEnginePair } from './fixtures/engine-pair.js';
import { rejection } from './fixtures/rejection.js';

/** 64 rows of 512 bytes landing 1 KiB apart (the second half of each 1 KiB token of a page). */
function headSlice(local: bigint, remote: bigint): TransferBatch {
  return batchOf([{ op: 'write', local, remote: remote + 512n, length: 64 * 512, remoteRows: 64, remotePitch: 1024 }]);
}

test('mooncake-tcp: a scattered write lands in its rows, the bytes between untouched; scattersWrites says so first', async () => {
  await withEnginePair('mooncake-tcp', async (a, b) => {
    const src = new Uint8Array(64 * 512).map((_, i) => (i * 7 + (i >> 9)) & 0xff);
    const dstBytes = new Uint8Array(64 * 1024 + 16).fill(0xee);
    const s = await a.registerMemory(src);
    const d = await b.registerMemory(dstBytes);
    assert.is(await a.scattersWrites(b.segmentName, s.addr, d.addr), true);
    const r = await a.transfer(b.segmentName, headSlice(s.addr, d.addr));
    assert.is(r.bytes, BigInt(64 * 512));
    for (let row = 0; row < 64; row++) {
      assert.ok(Buffer.from(dstBytes.subarray(row * 1024 + 512, row * 1024 + 1024)).equals(src.subarray(row * 512, row * 512 + 512)), `row ${row}`);
      assert.ok(
        dstBytes.subarray(row * 1024, row * 1024 + 512).every((x) => x === 0xee),
        `the first half of token ${row} is untouched`,
      );
    }
    assert.ok(
      dstBytes.subarray(64 * 1024).every((x) => x === 0xee),
      'nothing past the last row',
    );
  });
});

test('malformed remote rows and pitches: INVALID_ARGUMENT before anything is sent', async () => {
  await withEnginePair('mooncake-tcp', async (a, b) => {
    const s = await a.allocateMemory(64 * 1024);
    const dstBytes = new Uint8Array(128 * 1024);
    const d = await b.registerMemory(dstBytes);
    const bad: [string, (x: TransferBatch) => void, RegExp][] = [
      ['rows without pitches', (x) => delete x.remotePitches, /remoteRows.*together, or neither/],
      ['one entry short', (x) => (x.remoteRows = new Uint32Array(0)), /remoteRows` has 0 entries/],
      ['a read', (x) => (x.opcodes[0] = 0), /only a write has rows/],
      ['not whole rows', (x) => (x.lengths[0] = 64n * 512n + 1n), /not a whole number of rows/],
      ['overlapping rows', (x) => (x.remotePitches![0] = 100n), /rows would overlap/],
    ];
    for (const [what, spoil, message] of bad) {
      const x = headSlice(s.addr, d.addr);
      spoil(x);
      const e = await rejection(a.transfer(b.segmentName, x));
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${what}: ${String(e)}`);
      assert.match((e as Error).message, message, what);
    }
    const past = headSlice(s.addr, d.addr);
    past.remoteAddrs[0] = 0xffff_ffff_ffff_f000n;
    assert.ok(isTransferError(await rejection(a.transfer(b.segmentName, past)), 'ADDRESS_OUT_OF_RANGE'));
    // Rows that run past the peer's registered buffer: the peer refuses the request, nothing lands.
    const beyond = headSlice(s.addr, d.addr + 96n * 1024n);
    const e = await rejection(a.transfer(b.segmentName, beyond));
    assert.ok(isTransferError(e, 'ADDRESS_OUT_OF_RANGE'), String(e));
    assert.ok(
      dstBytes.every((x) => x === 0),
      'no byte landed',
    );
  });
});

test("a transport without scatterWrites (a third party's plugin): UNSUPPORTED_CAPABILITY, and scattersWrites is false", async () => {
  await withEnginePair(thirdPartyPluginConfig(), async (a, b) => {
    const src = await a.registerMemory(new Uint8Array(64 * 512));
    const dstBytes = new Uint8Array(64 * 1024);
    const dst = await b.registerMemory(dstBytes);
    assert.is(await a.scattersWrites(b.segmentName, src.addr, dst.addr), false);
    const e = await rejection(a.transfer(b.segmentName, headSlice(src.addr, dst.addr)));
    assert.ok(isTransferError(e, 'UNSUPPORTED_CAPABILITY'), String(e));
    assert.is((e as { plugin?: string }).plugin, 'example-memcpy');
    assert.ok(
      dstBytes.every((x) => x === 0),
      'no byte landed',
    );
    // Rows of 1 are ordinary requests: the same batch shape still goes through.
    const plain = allocateBatch(1);
    plain.opcodes[0] = 1;
    plain.localAddrs[0] = src.addr;
    plain.remoteAddrs[0] = dst.addr;
    plain.lengths[0] = 512n;
    plain.remoteRows = Uint32Array.of(1);
    plain.remotePitches = BigUint64Array.of(0n);
    assert.is((await a.transfer(b.segmentName, plain)).bytes, 512n);
  });
});

test.run();
