/**
 * The rules a decode's layout must meet to pair with a prefill's, written once: the
 * bootstrap server applies them to the fields a decode sends with its query, a prefill
 * rank to a decode's registration, and a decode to the head counts of the prefill layout
 * it was answered. Fields in SGLang's names, as the bootstrap server's API spells them;
 * values compared as text, so a value from a query string pairs only as written.
 */
export interface PairingFields {
  page_size: number;
  kv_cache_dtype: string;
  attention: string;
  num_layers: number;
}

type DecodeValue = string | number | null | undefined;

interface Rule {
  field: keyof PairingFields;
  pairs(decode: string, prefill: string): boolean;
  /** Said after the values when they do not pair. */
  why?: string;
}

const same = (decode: string, prefill: string): boolean => decode === prefill;

const RULES: readonly Rule[] = [
  // Pages map by token range: a decode page may hold several prefill pages, never a part of one.
  {
    field: 'page_size',
    pairs: (d, p) => d === p || (/^[1-9]\d{0,9}$/.test(d) && Number(d) % Number(p) === 0),
    why: ' (a decode page must hold a whole number of prefill pages)',
  },
  { field: 'kv_cache_dtype', pairs: same },
  { field: 'attention', pairs: same },
  { field: 'num_layers', pairs: same },
];

/** `field mismatch: decode has field=…, prefill has field=…`, the one wording of every refusal here. */
export function mismatchMessage(field: string, decode: unknown, prefill: unknown, why = ''): string {
  return `${field} mismatch: decode has ${field}=${String(decode).slice(0, 64)}, prefill has ${field}=${String(prefill)}${why}`;
}

/**
 * Why a decode's layout cannot pair with a prefill's (the first field that differs, both
 * values named), or undefined when it can. A decode field that is null or undefined was
 * not given and is not checked.
 */
export function pairingMismatch(decode: (field: keyof PairingFields) => DecodeValue, prefill: PairingFields): string | undefined {
  for (const rule of RULES) {
    const theirs = decode(rule.field);
    if (theirs === null || theirs === undefined) continue;
    const mine = String(prefill[rule.field]);
    if (!rule.pairs(String(theirs), mine)) return mismatchMessage(rule.field, theirs, mine, rule.why);
  }
  return undefined;
}

/** Why two declared totals of KV heads cannot pair (head slicing needs the same model), or undefined. */
export function totalHeadsMismatch(decode: number | undefined, prefill: number | undefined): string | undefined {
  if (decode === undefined || prefill === undefined || decode === prefill) return undefined;
  return mismatchMessage('total_kv_heads', decode, prefill);
}
