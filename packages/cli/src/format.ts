import pc from 'picocolors';

/** Renders rows as an aligned text table (first row is the header). */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => visible(r[c] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((cell, c) => cell + ' '.repeat(widths[c]! - visible(cell).length))
      .join('  ')
      .trimEnd();
  return [pc.bold(line(rows[0]!)), ...rows.slice(1).map(line)].join('\n');
}

// eslint-disable-next-line no-control-regex
const visible = (s: string): string => s.replace(/\x1b\[[0-9;]*m/g, '');

export function gbps(bytesPerSecond: number): string {
  return `${(bytesPerSecond / 1e9).toFixed(2)} GB/s`;
}

export function count(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : n.toFixed(0);
}

export function bytes(n: number): string {
  for (const [unit, size] of [
    ['GiB', 2 ** 30],
    ['MiB', 2 ** 20],
    ['KiB', 2 ** 10],
  ] as const) {
    if (n >= size && n % size === 0) return `${n / size} ${unit}`;
  }
  return `${n} B`;
}

/** Parses sizes like 4096, 64k, 64KiB, 1m, 1MiB, 1g. */
export function parseSize(text: string): number {
  const m = /^(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?$/i.exec(text.trim());
  if (!m) throw new Error(`Expected a size like 4096, 64k or 1MiB, got ${JSON.stringify(text)}`);
  const unit = (m[2] ?? 'b').toLowerCase()[0]!;
  const factor = unit === 'k' ? 2 ** 10 : unit === 'm' ? 2 ** 20 : unit === 'g' ? 2 ** 30 : 1;
  return Number(m[1]) * factor;
}
