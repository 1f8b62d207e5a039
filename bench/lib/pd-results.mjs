// What bench/pd.mjs learns from its ranks after a room or a run: whether every decode rank
// holds what its prefill ranks sent, and what the staging routes did.

/** Every head slice of every decode rank against the prefill rank that sent it (outside the timed region). */
export async function verifyRoom({ prefill, decode, slices }, what, src, dst) {
  await Promise.all(
    slices.flatMap((list, di) =>
      list.map(async (s) => {
        const [want, got] = await Promise.all([
          prefill[s.prefill].call('digest', { pages: src, headOffset: s.srcOffset, heads: s.count }),
          decode[di].call('digest', { pages: dst, headOffset: s.dstOffset, heads: s.count }),
        ]);
        if (want !== got)
          throw new Error(`${what}: decode rank ${di} heads [${s.dstOffset}, ${s.dstOffset + s.count}) do not hold what prefill rank ${s.prefill} sent`);
      }),
    ),
  );
}

/** How fast staging gathered and scattered, how many staged writes and per-token fallbacks, over the whole run. */
export async function stagingFigures({ prefill, decode }) {
  const pStats = await Promise.all(prefill.map((p) => p.call('stats')));
  const dStats = await Promise.all(decode.map((d) => d.call('stats')));
  const sum = (xs, key) => xs.reduce((a, x) => a + (x?.[key] ?? 0), 0);
  return {
    gatherGBps: sum(pStats, 'gatherMs') > 0 ? sum(pStats, 'stagedBytes') / sum(pStats, 'gatherMs') / 1e6 : undefined,
    scatterGBps: sum(dStats, 'scatterMs') > 0 ? sum(dStats, 'scatteredBytes') / sum(dStats, 'scatterMs') / 1e6 : undefined,
    staged: sum(pStats, 'gatherWrites') + sum(pStats, 'ringWrites') + sum(pStats, 'transportGathers') + sum(pStats, 'transportScatters'),
    transportGathers: sum(pStats, 'transportGathers'),
    transportScatters: sum(pStats, 'transportScatters'),
    ringWrites: sum(pStats, 'ringWrites'),
    fallbacks: pStats.reduce((a, x) => a + Object.values(x?.fallbacks ?? {}).reduce((p, q) => p + q, 0), 0),
  };
}

// Figures as the report prints them: GB/s, a case's ratio with its room/raw pairs and its
// ratio by CPU, the staging copier's speeds.
export const gb = (x) => (x / 1e9).toFixed(2);
export const ratioOf = (r) => r.ratio ?? r.pd / r.raw;
export const ratio = (r) =>
  `${ratioOf(r).toFixed(2)}${r.ratios ? ` (median of ${r.ratios.length} room/raw pairs: ${r.ratios.map((x) => x.toFixed(2)).join(', ')})` : ''}${r.cpuRatio ? `; by CPU of every rank, raw / PD: ${r.cpuRatio.toFixed(2)}` : ''}`;
export const copies = (r) =>
  [r.gatherGBps && `gather ${r.gatherGBps.toFixed(1)} GB/s`, r.scatterGBps && `scatter ${r.scatterGBps.toFixed(1)} GB/s`].filter(Boolean).join(', ');
