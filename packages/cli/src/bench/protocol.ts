/** Control messages between a bench initiator and its target (served on the engine's control endpoint). */
export const BENCH_INFO = 'te.bench.info';
export const BENCH_DIGEST = 'te.bench.digest';
export const BENCH_RANDOMIZE = 'te.bench.randomize';
/** Flips the bits of one byte of the target's buffer (the verifier's own test: TE_BENCH_CORRUPT_BYTE). */
export const BENCH_CORRUPT = 'te.bench.corrupt';

export interface BenchInfo {
  addr: bigint;
  length: bigint;
  plugin: string;
}

export interface DigestRequest {
  offset: bigint;
  length: bigint;
}
