import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { decodeMessage, encodeMessage, isTransferError } from '../src/index.js';
import { Unpackr } from 'msgpackr';
import { MsgpackBoundsError, checkMsgpackBounds } from '../src/engine/msgpack-bounds.js';

/** A 5-byte message whose header declares `n` array elements (array32) and nothing after it. */
function declaredArray(n: number, type = 0xdd): Uint8Array {
  const b = Buffer.alloc(5);
  b[0] = type;
  b.writeUInt32BE(n, 1);
  return b;
}

/**
 * Runs `body` counting the calls into msgpackr's decoder (the one that allocates and walks
 * what a header declares). The codec's Packr inherits `unpack` from Unpackr's prototype.
 */
function decoderCalls(body: () => void): number {
  const original = Unpackr.prototype.unpack;
  let calls = 0;
  Unpackr.prototype.unpack = function (this: Unpackr, ...args: Parameters<Unpackr['unpack']>) {
    calls++;
    return original.apply(this, args);
  } as Unpackr['unpack'];
  try {
    body();
  } finally {
    Unpackr.prototype.unpack = original;
  }
  return calls;
}

test('a header declaring millions of elements is refused before the decoder sees it (it walked 10^7 of them)', () => {
  // The counter sees the decoder when it does run.
  assert.is(
    decoderCalls(() => decodeMessage(encodeMessage([1, 2, 3]))),
    1,
  );
  for (const [n, type] of [
    [1e7, 0xdd],
    [3e7, 0xdd],
    [1e7, 0xdf],
  ] as const) {
    let error: unknown;
    const calls = decoderCalls(() => {
      try {
        decodeMessage(declaredArray(n, type));
      } catch (e) {
        error = e;
      }
    });
    assert.ok(isTransferError(error) && error.code === 'BAD_FRAME', `refused as BAD_FRAME: ${String(error)}`);
    assert.ok(error.cause instanceof MsgpackBoundsError, `refused by the bounds scan: ${String(error.cause)}`);
    assert.match(error.message, /declares \d+ elements with 0 bytes left/);
    assert.is(calls, 0, 'the decoder never ran, so it allocated and walked nothing');
  }
});

test('the same declared lengths nested in a message te would send are refused', () => {
  const good = encodeMessage({ v: 1, id: 7, type: 'te.kv.p.request', body: { pages: new Int32Array([1, 2, 3]) } });
  const bomb = Buffer.concat([Buffer.from([0x92]), good, declaredArray(1e7)]);
  assert.throws(() => checkMsgpackBounds(bomb), /declares/);
});

test('extension types that decode more than their payload are refused; typed arrays, bigints, dates pass', () => {
  // Set (0x73) reads the next value, whatever its size; records (0x72) define structures.
  for (const type of [0x73, 0x65, 0x78, 0x69, 0x70, 0x62, 0x72]) {
    assert.throws(() => checkMsgpackBounds(Buffer.from([0xd4, type, 0x00])), /extension type/);
  }
  const value = { a: new BigUint64Array([1n, 2n ** 63n]), b: 2n ** 100n, c: new Date(0), d: undefined, e: -5n, f: new Float64Array(4) };
  const bytes = encodeMessage(value);
  checkMsgpackBounds(bytes);
  const back = decodeMessage<typeof value>(bytes);
  assert.equal(back.a, value.a);
  assert.is(back.b, value.b);
  assert.is(back.c.getTime(), 0);
});

test('deep nesting, truncation and payloads past the end are refused with the position', () => {
  const deep = Buffer.alloc(200, 0x91);
  assert.throws(() => checkMsgpackBounds(Buffer.concat([deep, Buffer.from([0xc0])])), /nesting deeper than 64/);
  assert.throws(() => checkMsgpackBounds(Buffer.from([0xdb, 0, 1, 0, 0, 0x41])), /needs 65541 bytes/);
  assert.throws(() => checkMsgpackBounds(Buffer.from([0x93, 0x01])), /declares 3 elements|ended inside/);
  assert.throws(() => checkMsgpackBounds(Buffer.from([0xc1])), /0xc1/);
});

test('decodeMessage answers bytes that are not one msgpack value with BAD_FRAME, whichever check refuses them', () => {
  // Before, the bounds scan threw its own Error subclass and msgpackr a plain Error
  // ("Unexpected end of MessagePack data"), neither of them a TransferError.
  for (const [bytes, why] of [
    [Buffer.alloc(0), /malformed msgpack message: .*(end|ended|empty)/i],
    [Buffer.from([0xc1]), /malformed msgpack message: .*0xc1/],
    [Buffer.from([0x93, 0x01]), /malformed msgpack message: /],
    [Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff]), /malformed msgpack message: .*declares 4294967295 elements/],
    ['not bytes' as unknown as Uint8Array, /malformed msgpack message: /],
  ] as const) {
    let error: unknown;
    try {
      decodeMessage(bytes);
    } catch (e) {
      error = e;
    }
    assert.ok(isTransferError(error), `${bytes.toString()}: a TransferError, got ${String(error)}`);
    assert.is(error.code, 'BAD_FRAME');
    assert.match(error.message, why);
  }
});

test('every message shape te encodes passes the scan and decodes as before (random values)', () => {
  for (let i = 0; i < 500; i++) {
    const value = {
      v: 1,
      id: i,
      ok: i % 2 === 0,
      type: `te.${randomBytes(4).toString('hex')}`,
      body: {
        addrs: new BigUint64Array([BigInt(i), 0xffff_ffff_ffff_ffffn]),
        pages: Int32Array.from({ length: i % 70 }, (_, k) => k * i),
        nested: { list: Array.from({ length: i % 20 }, (_, k) => ({ k, s: 'x'.repeat(k * 13), n: -k * 1e9 })) },
        bytes: randomBytes(i % 300),
        big: BigInt(i) << 40n,
        nothing: null,
      },
    };
    const bytes = encodeMessage(value);
    checkMsgpackBounds(bytes);
    assert.equal(decodeMessage(bytes), value);
  }
});

test.run();
