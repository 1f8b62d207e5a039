/** Percentile of a sorted array (nearest rank). */
export function percentile(sorted: Float64Array | number[], p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

/** Latency samples in microseconds, growable without per-sample allocation. */
export class Samples {
  private data = new Float64Array(1 << 14);
  private n = 0;

  push(us: number): void {
    if (this.n === this.data.length) {
      const bigger = new Float64Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.n++] = us;
  }

  get count(): number {
    return this.n;
  }

  sorted(): Float64Array {
    return this.data.slice(0, this.n).sort();
  }
}
