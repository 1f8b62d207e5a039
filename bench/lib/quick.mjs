// TE_BENCH_QUICK=1 shrinks a benchmark to a smoke run (used by the test that runs every
// documented command): same code paths and checks, small sizes, figures not meaningful.
export const QUICK = /^(1|true|yes)$/i.test(process.env.TE_BENCH_QUICK ?? '');

/** Overrides parsed arguments with smoke-run values when TE_BENCH_QUICK is set. */
export function quick(values, small) {
  if (QUICK) Object.assign(values, small);
  return values;
}
