import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { decodeMessage, encodeMessage } from '../src/index.js';
import { checkMsgpackBounds } from '../src/engine/msgpack-bounds.js';

/** A 5-byte message whose header declares `n` array elements (array32) and nothing after it. */
function declaredArray(n: number, type = 0xdd): Uint8Array {
  const b = Buffer.alloc(5);
  b[0] = type;
  b.writeUInt32BE(n, 1);
  return b;
}

function decodeTime(bytes: Uint8Array): { ms: number; error?: string } {
  const t = performance.now();
  try {
    decodeMessage(bytes);
    return { ms: performance.now() - t };
  } catch (e) {
    return { ms: performance.now() - t, error: (e as Error).message };
  }
}

test('a header declaring millions of elements is refused at once (the decoder walked it: 350 ms for 10^7)', () => {
  for (const [n, type] of [[1e7, 0xdd], [3e7, 0xdd], [1e7, 0xdf]] as const) {
    const r = decodeTime(declaredArray(n, type));
    assert.ok(r.error, 'refused');
    assert.match(r.error!, /declares \d+ elements/);
    assert.ok(r.ms < 50, `took ${r.ms.toFixed(1)} ms`);
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
