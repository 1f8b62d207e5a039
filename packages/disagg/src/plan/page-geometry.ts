/**
 * How one KV item (one page of one layer) is laid out: `tokens` rows of `heads` units of
 * `headBytes` bytes, token-major (`NHD`, `[token][head][bytes]`) or head-major (`HND`,
 * `[head][token][bytes]`). MLA pages and state items are one "head" wide.
 */
export type PageLayout = 'NHD' | 'HND';

export interface PageGeometry {
  tokens: number;
  heads: number;
  headBytes: number;
  layout: PageLayout;
}

/** Byte offset of (token, head) inside an item. */
export function offsetOf(g: PageGeometry, token: number, head: number): number {
  return g.layout === 'NHD' ? (token * g.heads + head) * g.headBytes : (head * g.tokens + token) * g.headBytes;
}

/** Bytes of one item. */
export function itemBytes(g: PageGeometry): number {
  return g.tokens * g.heads * g.headBytes;
}

/**
 * The geometry of a side's items from its item length: `headBytes` is what is left once
 * the page is divided into tokens and heads, and must come out whole.
 */
export function geometryOf(itemLength: number, tokens: number, heads: number, layout: PageLayout): PageGeometry {
  const headBytes = itemLength / (tokens * heads);
  if (!Number.isInteger(headBytes) || headBytes < 1)
    throw new RangeError(`an item of ${itemLength} bytes does not split into ${tokens} tokens × ${heads} heads of whole bytes`);
  return { tokens, heads, headBytes, layout };
}
