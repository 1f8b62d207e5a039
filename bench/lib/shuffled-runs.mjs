// Destination pages as a paged KV allocator hands them out: runs of consecutive pages, the
// runs in shuffled order (a fixed seed, so every run of a benchmark sees the same pages).

/** Pages per run. */
export const RUN = 8;

/** `n` destination pages: runs of RUN consecutive pages, in an order shuffled by `seed`. */
export function shuffledRuns(n, seed) {
  const runs = Array.from({ length: Math.ceil(n / RUN) + 2 }, (_, i) => i);
  let x = seed;
  for (let i = runs.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    const j = x % (i + 1);
    [runs[i], runs[j]] = [runs[j], runs[i]];
  }
  return runs.flatMap((r) => Array.from({ length: RUN }, (_, k) => r * RUN + k)).slice(0, n);
}
