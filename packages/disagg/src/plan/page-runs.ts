/**
 * Runs of pages contiguous on both sides: source pages `src[i..i+n)` and destination
 * pages `dst[i..i+n)` both increase by one at every step. One descriptor per run per
 * layer replaces one per page, which is what makes a large request cheap to submit.
 */
export interface PageRuns {
  /** First source page of each run. */
  readonly src: Uint32Array;
  /** First destination page of each run. */
  readonly dst: Uint32Array;
  /** Pages in each run. */
  readonly len: Uint32Array;
  readonly count: number;
}

export function mergePageRuns(src: Uint32Array, dst: Uint32Array): PageRuns {
  if (src.length !== dst.length) throw new RangeError(`source and destination page lists differ in length (${src.length} vs ${dst.length})`);
  const n = src.length;
  const outSrc = new Uint32Array(n);
  const outDst = new Uint32Array(n);
  const outLen = new Uint32Array(n);
  let count = 0;
  for (let i = 0; i < n;) {
    const s = src[i]!;
    const d = dst[i]!;
    let j = i + 1;
    while (j < n && src[j] === s + (j - i) && dst[j] === d + (j - i)) j++;
    outSrc[count] = s;
    outDst[count] = d;
    outLen[count] = j - i;
    count++;
    i = j;
  }
  return { src: outSrc.subarray(0, count), dst: outDst.subarray(0, count), len: outLen.subarray(0, count), count };
}
