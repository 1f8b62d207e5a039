// Verified writes through the engine (TransferBatch.verifyWrites): carried by a transport that
// declares `verifiedWrites` (mooncake-tcp, two engines), checked in TypeScript before any
// transport sees them, refused with UNSUPPORTED_CAPABILITY by one that does not (a third
// party's plugin), and asked about beforehand with `verifiesWrites`.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, isTransferError, type TransferBatch } from '@te/connector';
import { thirdPartyPluginConfig, withEnginePair } from './fixtures/engine-pair.js';
import { rejection } from './fixtures/rejection.js';

function verified(requests: Parameters<typeof batchOf>[0]): TransferBatch {
  return { ...batchOf(requests), verifyWrites: true };
}

test('mooncake-tcp: verified writes land byte-exact; verifiesWrites says so first; reads or a non-boolean flag are refused unsent', async () => {
  await withEnginePair('mooncake-tcp', async (a, b) => {
    const src = new Uint8Array(3 << 20).map((_, i) => (i * 13 + (i >> 12)) & 0xff);
    const dstBytes = new Uint8Array(3 << 20);
    const s = await a.registerMemory(src);
    const d = await b.registerMemory(dstBytes);
    assert.is(await a.verifiesWrites(b.segmentName, s.addr, d.addr), true);
    const r = await a.transfer(
      b.segmentName,
      verified([
        { op: 'write', local: s.addr, remote: d.addr, length: 2 << 20 },
        { op: 'write', local: s.addr + (2n << 20n), remote: d.addr + (2n << 20n), length: 1 << 20 },
      ]),
    );
    assert.is(r.bytes, 3n << 20n);
    assert.ok(Buffer.from(dstBytes).equals(src), 'every byte landed');
    dstBytes.fill(0);
    const withRead = verified([
      { op: 'write', local: s.addr, remote: d.addr, length: 4096 },
      { op: 'read', local: s.addr, remote: d.addr, length: 4096 },
    ]);
    const e = await rejection(a.transfer(b.segmentName, withRead));
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    assert.match((e as Error).message, /verifies writes only/);
    const odd = { ...batchOf([{ op: 'write', local: s.addr, remote: d.addr, length: 4096 }]), verifyWrites: 'yes' as unknown as boolean };
    assert.ok(isTransferError(await rejection(a.transfer(b.segmentName, odd)), 'INVALID_ARGUMENT'));
    assert.ok(
      dstBytes.every((x) => x === 0),
      'no byte landed',
    );
  });
});

test("a transport without verifiedWrites (a third party's plugin): UNSUPPORTED_CAPABILITY, and verifiesWrites is false", async () => {
  await withEnginePair(thirdPartyPluginConfig(), async (a, b) => {
    const src = await a.registerMemory(new Uint8Array(4096).fill(7));
    const dstBytes = new Uint8Array(4096);
    const dst = await b.registerMemory(dstBytes);
    assert.is(await a.verifiesWrites(b.segmentName, src.addr, dst.addr), false);
    const e = await rejection(a.transfer(b.segmentName, verified([{ op: 'write', local: src.addr, remote: dst.addr, length: 4096 }])));
    assert.ok(isTransferError(e, 'UNSUPPORTED_CAPABILITY'), String(e));
    assert.is((e as { plugin?: string }).plugin, 'example-memcpy');
    assert.ok(
      dstBytes.every((x) => x === 0),
      'no byte landed',
    );
  });
});

test.run();
