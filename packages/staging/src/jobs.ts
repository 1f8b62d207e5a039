/**
 * A batch of strided copies as one Float64Array, JOB_FIELDS numbers per copy: for
 * r < reps, for i < rows, `width` bytes from src + r·srcRepStride + i·srcPitch to
 * dst + r·dstRepStride + i·dstPitch. Addresses are numbers (below 2^53).
 */
export const JOB_FIELDS = 9;

export interface StridedCopy {
  src: number;
  dst: number;
  width: number;
  rows: number;
  srcPitch: number;
  dstPitch: number;
  reps: number;
  srcRepStride: number;
  dstRepStride: number;
}

/** Appends copies to a growing Float64Array without an object per copy. */
export class CopyList {
  private data: Float64Array;
  count = 0;
  bytes = 0;

  constructor(capacity = 64) {
    this.data = new Float64Array(Math.max(1, capacity) * JOB_FIELDS);
  }

  push(src: number, dst: number, width: number, rows: number, srcPitch: number, dstPitch: number, reps = 1, srcRepStride = 0, dstRepStride = 0): void {
    if (width === 0 || rows === 0 || reps === 0) return;
    if ((this.count + 1) * JOB_FIELDS > this.data.length) {
      const grown = new Float64Array(this.data.length * 2);
      grown.set(this.data);
      this.data = grown;
    }
    const d = this.data;
    let o = this.count * JOB_FIELDS;
    d[o++] = src;
    d[o++] = dst;
    d[o++] = width;
    d[o++] = rows;
    d[o++] = srcPitch;
    d[o++] = dstPitch;
    d[o++] = reps;
    d[o++] = srcRepStride;
    d[o] = dstRepStride;
    this.count++;
    this.bytes += width * rows * reps;
  }

  /** The filled part (a view, no copy). */
  finish(): Float64Array {
    return this.data.subarray(0, this.count * JOB_FIELDS);
  }

  at(i: number): StridedCopy {
    const d = this.data;
    const o = i * JOB_FIELDS;
    return {
      src: d[o]!,
      dst: d[o + 1]!,
      width: d[o + 2]!,
      rows: d[o + 3]!,
      srcPitch: d[o + 4]!,
      dstPitch: d[o + 5]!,
      reps: d[o + 6]!,
      srcRepStride: d[o + 7]!,
      dstRepStride: d[o + 8]!,
    };
  }
}
