import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { pairingMismatch, totalHeadsMismatch, type PairingFields } from '../src/shared/pairing.js';

// The one set of rules the bootstrap server, a prefill rank and a decode apply to a pairing.
const prefill: PairingFields = { page_size: 16, kv_cache_dtype: 'bf16', attention: 'mha', num_layers: 32 };
const cases: [string, Partial<Record<keyof PairingFields, string | number | null>>, RegExp | undefined][] = [
  ['the same layout', { page_size: 16, kv_cache_dtype: 'bf16', attention: 'mha', num_layers: 32 }, undefined],
  ['fields not given', { page_size: null, kv_cache_dtype: null }, undefined],
  ['a decode page holding two prefill pages', { page_size: 32 }, undefined],
  ['a decode page holding two prefill pages, as a query string', { page_size: '32' }, undefined],
  [
    'a decode page smaller than the prefill page',
    { page_size: 8 },
    /^page_size mismatch: decode has page_size=8, prefill has page_size=16 \(a decode page must hold a whole number of prefill pages\)$/,
  ],
  ['a decode page of one and a half prefill pages', { page_size: 24 }, /page_size=24/],
  ['a page size that is not a number', { page_size: '16x' }, /page_size mismatch/],
  ['another dtype', { kv_cache_dtype: 'fp8' }, /^kv_cache_dtype mismatch: decode has kv_cache_dtype=fp8, prefill has kv_cache_dtype=bf16$/],
  ['another attention', { attention: 'mla' }, /^attention mismatch/],
  ['another layer count', { num_layers: 30 }, /^num_layers mismatch: decode has num_layers=30, prefill has num_layers=32$/],
  ['a layer count spelled otherwise', { num_layers: '032' }, /num_layers mismatch/],
  ['the first field that differs is named', { kv_cache_dtype: 'fp8', num_layers: 30 }, /^kv_cache_dtype/],
  ['a long value is cut', { kv_cache_dtype: 'x'.repeat(500) }, /^kv_cache_dtype mismatch: decode has kv_cache_dtype=x{64}, prefill/],
];

for (const [name, decode, expected] of cases) {
  test(`pairing: ${name}`, () => {
    const got = pairingMismatch((field) => decode[field], prefill);
    if (expected === undefined) assert.is(got, undefined);
    else assert.match(got ?? '', expected);
  });
}

test('total KV heads pair when equal or when either side does not declare them', () => {
  assert.is(totalHeadsMismatch(8, 8), undefined);
  assert.is(totalHeadsMismatch(undefined, 8), undefined);
  assert.is(totalHeadsMismatch(8, undefined), undefined);
  assert.is(totalHeadsMismatch(8, 4), 'total_kv_heads mismatch: decode has total_kv_heads=8, prefill has total_kv_heads=4');
});

test.run();
