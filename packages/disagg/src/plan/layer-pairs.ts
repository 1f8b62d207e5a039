/**
 * Which KV buffer of the prefill rank fills which buffer of the decode rank. Buffers
 * follow SGLang's KVArgs order: MHA `[K_0..K_{L-1}, V_0..V_{L-1}]`, MLA one per layer,
 * each side holding only its own PP stage's layers (`firstLayer`, `layers`).
 */
export interface LayerSpan {
  /** Absolute index of the side's first layer. */
  firstLayer: number;
  /** Layers this side holds. */
  layers: number;
}

export type AttentionKind = 'mha' | 'mla';

/** Buffer pairs `[src, dst, ...]` for the given absolute layers (default: all the prefill holds). */
export function kvBufferPairs(attention: AttentionKind, prefill: LayerSpan, decode: LayerSpan, layers?: ArrayLike<number>): Int32Array {
  const list = layers ?? Array.from({ length: prefill.layers }, (_, i) => prefill.firstLayer + i);
  const perLayer = attention === 'mha' ? 2 : 1;
  const out = new Int32Array(list.length * perLayer * 2);
  let o = 0;
  for (let i = 0; i < list.length; i++) {
    const layer = list[i]!;
    const s = layer - prefill.firstLayer;
    const d = layer - decode.firstLayer;
    if (s < 0 || s >= prefill.layers)
      throw new RangeError(`layer ${layer} is not held by the prefill stage [${prefill.firstLayer}, ${prefill.firstLayer + prefill.layers})`);
    if (d < 0 || d >= decode.layers)
      throw new RangeError(`layer ${layer} is not held by the decode stage [${decode.firstLayer}, ${decode.firstLayer + decode.layers})`);
    out[o++] = s;
    out[o++] = d;
    if (perLayer === 2) {
      out[o++] = prefill.layers + s;
      out[o++] = decode.layers + d;
    }
  }
  return out;
}

/** Pairs buffer i with buffer i for `count` buffers (aux tensors, state tensors). */
export function identityPairs(count: number): Int32Array {
  const out = new Int32Array(count * 2);
  for (let i = 0; i < count; i++) {
    out[2 * i] = i;
    out[2 * i + 1] = i;
  }
  return out;
}
