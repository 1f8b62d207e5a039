/**
 * JSON with 64-bit integers. Mooncake writes buffer addresses and lengths as plain JSON
 * numbers (u64): going through IEEE doubles would silently round any above 2^53, so integer
 * literals are read as bigint here, and written from bigint exactly. Everything else is
 * ordinary JSON. Depth and size are bounded by the caller's frame limit and MAX_DEPTH.
 */
import { TransferError } from '@te/connector';

export type Json64 = null | boolean | number | bigint | string | Json64[] | { [key: string]: Json64 };

const MAX_DEPTH = 32;

class Reader {
  i = 0;
  constructor(readonly s: string) {}
  fail(why: string): never {
    throw new TransferError('BAD_FRAME', `malformed JSON at offset ${this.i}: ${why}`, { plugin: 'mooncake-wire' });
  }
  ws(): void {
    while (this.i < this.s.length && ' \t\r\n'.includes(this.s[this.i]!)) this.i++;
  }
  value(depth: number): Json64 {
    if (depth > MAX_DEPTH) this.fail(`nested deeper than ${MAX_DEPTH}`);
    this.ws();
    const c = this.s[this.i];
    if (c === '{') return this.object(depth);
    if (c === '[') return this.array(depth);
    if (c === '"') return this.string();
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) return this.number();
    for (const [word, v] of [
      ['true', true],
      ['false', false],
      ['null', null],
    ] as const) {
      if (this.s.startsWith(word, this.i)) {
        this.i += word.length;
        return v;
      }
    }
    return this.fail(c === undefined ? 'unexpected end' : `unexpected ${JSON.stringify(c)}`);
  }
  object(depth: number): Json64 {
    const out: Record<string, Json64> = Object.create(null);
    this.i++;
    this.ws();
    if (this.s[this.i] === '}') {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.i] !== '"') this.fail('expected a key');
      const k = this.string();
      this.ws();
      if (this.s[this.i++] !== ':') this.fail('expected ":"');
      out[k] = this.value(depth + 1);
      this.ws();
      const c = this.s[this.i++];
      if (c === '}') return out;
      if (c !== ',') this.fail('expected "," or "}"');
    }
  }
  array(depth: number): Json64 {
    const out: Json64[] = [];
    this.i++;
    this.ws();
    if (this.s[this.i] === ']') {
      this.i++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth + 1));
      this.ws();
      const c = this.s[this.i++];
      if (c === ']') return out;
      if (c !== ',') this.fail('expected "," or "]"');
    }
  }
  string(): string {
    // eslint-disable-next-line no-control-regex -- JSON forbids raw control characters in strings: the pattern names them
    const m = /^"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/.exec(this.s.slice(this.i, this.i + 1_100_000));
    if (!m) this.fail('bad string');
    this.i += m[0].length;
    return JSON.parse(m[0]) as string;
  }
  number(): number | bigint {
    const m = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i, this.i + 400));
    if (!m) this.fail('bad number');
    this.i += m[0].length;
    return m[1] === undefined && m[2] === undefined ? BigInt(m[0]) : Number(m[0]);
  }
}

/** Parses JSON text; integers become bigint. Throws BAD_FRAME on anything that is not one JSON value. */
export function parseJson64(text: string): Json64 {
  const r = new Reader(text);
  const v = r.value(0);
  r.ws();
  if (r.i !== text.length) r.fail('trailing characters');
  return v;
}

/** Writes JSON compactly, keys in the given order; bigint as an exact integer literal. */
export function stringifyJson64(v: Json64): string {
  if (typeof v === 'bigint') return v.toString();
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(stringifyJson64).join(',')}]`;
  return `{${Object.entries(v)
    .map(([k, x]) => `${JSON.stringify(k)}:${stringifyJson64(x)}`)
    .join(',')}}`;
}
