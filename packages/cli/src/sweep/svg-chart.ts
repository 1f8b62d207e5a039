/**
 * A self-contained SVG of a block-size sweep: GB/s per block size (log scale) for each
 * plugin with the same-run baselines drawn in, and p99 batch latency beneath. No browser,
 * no dependency: the benchmarks page shows the file as an image.
 */
export interface SweepSeries {
  name: string;
  points: { blockSize: number; gbps: number; p99Us?: number }[];
  dashed?: boolean;
}

const W = 760;
const PANEL_H = 240;
const M = { left: 70, right: 170, top: 40, bottom: 40 };
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const sizeLabel = (b: number): string => (b >= 1 << 20 ? `${b / (1 << 20)} MiB` : `${b / 1024} KiB`);

function panel(
  series: SweepSeries[],
  value: (p: SweepSeries['points'][number]) => number | undefined,
  top: number,
  title: string,
  unit: string,
  logY: boolean,
  sizes: number[],
): string {
  const vals = series.flatMap((s) => s.points.map(value)).filter((v): v is number => v !== undefined && v > 0);
  const max = Math.max(...vals, 1e-9);
  const min = logY ? Math.min(...vals) : 0;
  const x = (b: number): number =>
    M.left + ((Math.log2(b) - Math.log2(sizes[0]!)) / Math.max(1, Math.log2(sizes[sizes.length - 1]!) - Math.log2(sizes[0]!))) * (W - M.left - M.right);
  const h = PANEL_H - M.bottom;
  const y = (v: number): number =>
    logY ? top + h - ((Math.log10(v) - Math.log10(min)) / Math.max(1e-9, Math.log10(max) - Math.log10(min))) * (h - 20) : top + h - (v / max) * (h - 20);
  const out: string[] = [`<text x="${M.left}" y="${top - 8}" font-size="14" font-weight="bold">${esc(title)}</text>`];
  out.push(
    `<line x1="${M.left}" y1="${top + h}" x2="${W - M.right}" y2="${top + h}" stroke="#888"/><line x1="${M.left}" y1="${top}" x2="${M.left}" y2="${top + h}" stroke="#888"/>`,
  );
  for (const b of sizes) out.push(`<text x="${x(b)}" y="${top + h + 16}" font-size="10" text-anchor="middle">${sizeLabel(b)}</text>`);
  const ticks = logY ? [min, Math.sqrt(min * max), max] : [0, max / 2, max];
  for (const t of ticks)
    out.push(
      `<text x="${M.left - 6}" y="${y(t) + 3}" font-size="10" text-anchor="end">${t >= 100 ? t.toFixed(0) : t.toFixed(2)}</text><line x1="${M.left}" y1="${y(t)}" x2="${W - M.right}" y2="${y(t)}" stroke="#eee"/>`,
    );
  out.push(`<text x="16" y="${top + h / 2}" font-size="11" transform="rotate(-90 16 ${top + h / 2})" text-anchor="middle">${esc(unit)}</text>`);
  series.forEach((s, i) => {
    const pts = s.points.map((p) => [p.blockSize, value(p)] as const).filter(([, v]) => v !== undefined && v > 0) as [number, number][];
    if (pts.length === 0) return;
    const color = COLORS[i % COLORS.length];
    const d = pts.map(([b, v], j) => `${j ? 'L' : 'M'}${x(b).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    for (const [b, v] of pts) out.push(`<circle cx="${x(b).toFixed(1)}" cy="${y(v).toFixed(1)}" r="2.5" fill="${color}"/>`);
    out.push(
      `<line x1="${W - M.right + 12}" y1="${top + 14 + i * 16}" x2="${W - M.right + 32}" y2="${top + 14 + i * 16}" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/><text x="${W - M.right + 38}" y="${top + 18 + i * 16}" font-size="11">${esc(s.name)}</text>`,
    );
  });
  return out.join('\n');
}

export function sweepSvg(title: string, throughput: SweepSeries[], latency: SweepSeries[], note: string): string {
  const sizes = [...new Set(throughput.flatMap((s) => s.points.map((p) => p.blockSize)))].sort((a, b) => a - b);
  const height = 2 * PANEL_H + M.top + 40;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" viewBox="0 0 ${W} ${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${M.left}" y="20" font-size="15" font-weight="bold">${esc(title)}</text>`,
    panel(throughput, (p) => p.gbps, M.top + 20, 'Throughput (GB/s) by block size', 'GB/s', false, sizes),
    panel(latency, (p) => p.p99Us, M.top + 20 + PANEL_H + 10, 'p99 batch latency (µs, log scale)', 'µs', true, sizes),
    `<text x="${M.left}" y="${height - 8}" font-size="10" fill="#555">${esc(note)}</text>`,
    '</svg>',
  ].join('\n');
}
