// The control-plane fuzzer's randomness and mutators (fuzz/control-decode.ts): bytewise
// mutations of msgpack input, and structural ones (decode, replace a node with a value a
// hostile peer could encode, re-encode). Reproducible from the seed.
import { decodeMessage, encodeMessage } from '../packages/connector/src/engine/codec.js';
import { MSG } from '../packages/disagg/src/protocol/messages.js';

/** Largest input the fuzzer sends. */
export const MAX_INPUT = 256 * 1024;

// ---------------------------------------------------------------- deterministic randomness
let state = 0n;
export function seedRandom(seed: bigint): void {
  state = seed & 0xffffffffffffffffn || 1n;
}
/** xorshift64*: reproducible from the printed seed. */
export function next(): number {
  state ^= state >> 12n;
  state ^= (state << 25n) & 0xffffffffffffffffn;
  state ^= state >> 27n;
  return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 32n);
}
export const rand = (n: number): number => (n <= 0 ? 0 : next() % n);
export const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)]!;

// ---------------------------------------------------------------- mutators
const INTERESTING8 = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xd4, 0xd9, 0xdc, 0xdd, 0xde, 0xdf, 0xc7, 0xc8, 0xc9];
const INTERESTING32 = [0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0x10000, 0xffff];

export function mutateBytes(input: Buffer, corpus: Buffer[]): Buffer {
  let b = Buffer.from(input);
  const rounds = 1 + rand(4);
  for (let r = 0; r < rounds; r++) {
    const pos = rand(b.length + 1);
    switch (rand(9)) {
      case 0:
        if (b.length) b[rand(b.length)] ^= 1 << rand(8);
        break;
      case 1:
        if (b.length) b[rand(b.length)] = rand(256);
        break;
      case 2:
        if (b.length) b[rand(b.length)] = pick(INTERESTING8);
        break;
      case 3:
        if (b.length >= 4) b.writeUInt32BE(pick(INTERESTING32), rand(b.length - 3));
        break;
      case 4:
        b = Buffer.concat([b.subarray(0, pos), Buffer.from([pick(INTERESTING8), rand(256)]), b.subarray(pos)]);
        break;
      case 5:
        if (b.length) b = Buffer.concat([b.subarray(0, pos), b.subarray(Math.min(b.length, pos + 1 + rand(16)))]);
        break;
      case 6: {
        // duplicate a chunk
        const start = rand(b.length),
          len = rand(Math.min(64, b.length - start) + 1);
        b = Buffer.concat([b.subarray(0, pos), b.subarray(start, start + len), b.subarray(pos)]);
        break;
      }
      case 7: {
        // splice with another input
        const other = pick(corpus);
        const cut = rand(other.length + 1);
        b = Buffer.concat([b.subarray(0, pos), other.subarray(cut)]);
        break;
      }
      case 8:
        b = b.subarray(0, pos);
        break; // truncate
    }
  }
  return b.length > MAX_INPUT ? b.subarray(0, MAX_INPUT) : b;
}

/** A value a hostile peer could encode; sizes stay well under the 16 MiB message cap. */
function hostileValue(depth = 0): unknown {
  switch (rand(24)) {
    case 0:
      return null;
    case 1:
      return undefined;
    case 2:
      return pick([0, -0, -1, 1, 0.5, NaN, Infinity, -Infinity, 2 ** 31, 2 ** 32, 2 ** 53, -(2 ** 53), Number.MAX_VALUE]);
    case 3:
      return pick([0n, 1n, -1n, 2n ** 63n - 1n, 2n ** 64n - 1n, -(2n ** 63n), 0x4000n]);
    case 4:
      return pick(['', 'x', '__proto__', 'constructor', 'toString', 'te.descriptor.get', MSG.register, MSG.request, '\u0000', '\ud800']);
    case 5:
      return 'A'.repeat(pick([127, 128, 129, 4096, 4097, 70_000]));
    case 6:
      return rand(2) === 0;
    case 7:
      return new Uint32Array(rand(64)).map(() => next());
    case 8:
      return new BigUint64Array(rand(16)).map(() => BigInt(next()) << 20n);
    case 9:
      return pick([new Float64Array(3), new Int8Array(5), new Uint8Array(7), new BigInt64Array(2), new Uint16Array(0)]);
    case 10:
      return Buffer.alloc(rand(128), rand(256));
    case 11:
      return new Date(next());
    case 12:
      return new Map([[hostileKey(), hostileValue(depth + 1)]]);
    case 13:
      return new Set([hostileValue(depth + 1)]);
    case 14:
      return new Error(`e${next()}`);
    case 15:
      return /x+/g;
    case 16: {
      // deep nesting (recursion in a decoder or a schema walk)
      let v: unknown = 1;
      for (let i = 0, n = pick([10, 100, 1000, 5000]); i < n; i++) v = rand(2) ? [v] : { a: v };
      return v;
    }
    case 17:
      return new Array(rand(2000)).fill(0).map(() => rand(4));
    case 18:
      return { toString: 0, valueOf: 0 };
    default: {
      if (depth > 4) return rand(100);
      if (rand(2)) return Array.from({ length: rand(5) }, () => hostileValue(depth + 1));
      const o: Record<string, unknown> = {};
      for (let i = 0, n = rand(5); i < n; i++)
        Object.defineProperty(o, hostileKey(), { value: hostileValue(depth + 1), enumerable: true, configurable: true, writable: true });
      return o;
    }
  }
}
function hostileKey(): string {
  return pick([
    'v',
    'id',
    'type',
    'body',
    'ok',
    'code',
    'message',
    'room',
    'pages',
    'addrs',
    'segment',
    'epoch',
    'name',
    'buffers',
    'transports',
    'addr',
    'length',
    'device',
    '__proto__',
    'constructor',
    'prototype',
    'toString',
    '',
    'x'.repeat(300),
  ]);
}

/** Decodes an input, replaces (or adds) one node with a hostile value and re-encodes it. */
export function mutateStructure(input: Buffer): Buffer | undefined {
  let root: unknown;
  try {
    root = decodeMessage(input);
  } catch {
    return undefined;
  }
  const holder = { root };
  // Walk to a random container.
  let parent: Record<string, unknown> = holder;
  let key = 'root';
  for (let d = 0; d < 6; d++) {
    const v = parent[key];
    if (typeof v !== 'object' || v === null || ArrayBuffer.isView(v) || v instanceof Map || v instanceof Set || v instanceof Date) break;
    const keys = Object.keys(v);
    if (keys.length === 0 || rand(3) === 0) break;
    parent = v as Record<string, unknown>;
    key = pick(keys);
  }
  const target = parent[key];
  if (rand(4) === 0 && typeof target === 'object' && target !== null && !Array.isArray(target)) {
    Object.defineProperty(target, hostileKey(), { value: hostileValue(), enumerable: true, configurable: true, writable: true });
  } else if (rand(6) === 0 && typeof target === 'object' && target !== null && !ArrayBuffer.isView(target)) {
    delete (target as Record<string, unknown>)[pick(Object.keys(target))];
  } else {
    parent[key] = hostileValue();
  }
  try {
    const out = encodeMessage(holder.root);
    return out.length > MAX_INPUT ? undefined : out;
  } catch {
    return undefined;
  }
}
