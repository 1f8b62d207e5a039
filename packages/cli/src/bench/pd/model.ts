// What `te bench pd` moves: a GQA model's KV cache (8 KV heads × 128 dim, bf16) in
// pages of 64 tokens, NHD, TP 1 on both sides: 128 KiB per page per layer for each of K and V.
export const KV_HEADS = 8;
export const HEAD_DIM = 128;
export const HEAD_BYTES = HEAD_DIM * 2;
export const PAGE_TOKENS = 64;

/** One rank process, as the orchestrator describes it (passed in TE_PD_BENCH_RANK). */
export interface PdRankSpec {
  role: 'prefill' | 'decode';
  connector: string;
  modulePath?: string;
  layers: number;
  /** Pages this rank holds. */
  pages: number;
  checksums: boolean;
  /** The decode: its prefill's bootstrap port. */
  bootstrapPort?: number;
}
