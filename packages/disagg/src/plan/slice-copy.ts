import { offsetOf, type PageGeometry } from './page-geometry.js';

/** Heads [srcOffset, srcOffset + count) of a source page into heads [dstOffset, ...) of a destination page. */
export interface HeadSlice {
  srcOffset: number;
  dstOffset: number;
  count: number;
}

/**
 * How one source page's head slice lands in a destination page, as one strided copy
 * relative to the two item bases: for r < reps, for i < rows, `width` bytes from
 * src + r·srcRepStride + i·srcPitch to dst + r·dstRepStride + i·dstPitch. Rows and reps
 * walk the destination in address order, so the bytes packed one after another are
 * exactly the destination's order: that packed form is the staging image. A destination
 * page holds `sub` source pages (its page size is a multiple): source page `sub` of it
 * starts `subStride` bytes further.
 */
export interface SliceCopy {
  srcOffset: number;
  dstOffset: number;
  subStride: number;
  width: number;
  rows: number;
  srcPitch: number;
  dstPitch: number;
  reps: number;
  srcRepStride: number;
  dstRepStride: number;
  /** Bytes of one piece (one source page of one buffer pair). */
  bytes: number;
  /** The piece is one contiguous range in the source / the destination. */
  srcContiguous: boolean;
  dstContiguous: boolean;
}

function contiguous(width: number, rows: number, pitch: number, reps: number, repStride: number): boolean {
  return (rows === 1 || pitch === width) && (reps === 1 || repStride === width * rows);
}

/**
 * Plans the copy of one page's head slice between two geometries (same head size; the
 * destination's tokens a whole multiple of the source's). Pure, O(1).
 */
export function planSliceCopy(src: PageGeometry, dst: PageGeometry, slice: HeadSlice): SliceCopy {
  if (src.headBytes !== dst.headBytes) throw new RangeError(`head sizes differ: ${src.headBytes} bytes at the source, ${dst.headBytes} at the destination`);
  if (dst.tokens % src.tokens !== 0)
    throw new RangeError(`destination pages of ${dst.tokens} tokens are not a whole multiple of source pages of ${src.tokens}`);
  const { count } = slice;
  if (count < 1 || slice.srcOffset + count > src.heads || slice.dstOffset + count > dst.heads) {
    throw new RangeError(
      `head slice [${slice.srcOffset}+${count}) / [${slice.dstOffset}+${count}) exceeds ${src.heads} source / ${dst.heads} destination heads`,
    );
  }
  const hb = src.headBytes;
  const T = src.tokens;
  let width: number, rows: number, srcPitch: number, dstPitch: number, reps: number, srcRepStride: number, dstRepStride: number;
  if (dst.layout === 'NHD') {
    if (src.layout === 'NHD') [width, rows, srcPitch, dstPitch, reps, srcRepStride, dstRepStride] = [count * hb, T, src.heads * hb, dst.heads * hb, 1, 0, 0];
    // Token by token, the slice's heads sit one page of tokens apart in the source.
    else [width, rows, srcPitch, dstPitch, reps, srcRepStride, dstRepStride] = [hb, count, T * hb, hb, T, hb, dst.heads * hb];
  } else if (src.layout === 'HND') {
    [width, rows, srcPitch, dstPitch, reps, srcRepStride, dstRepStride] = [T * hb, count, T * hb, dst.tokens * hb, 1, 0, 0];
  } else {
    // Head by head, the tokens sit one row of heads apart in the source.
    [width, rows, srcPitch, dstPitch, reps, srcRepStride, dstRepStride] = [hb, T, src.heads * hb, hb, count, hb, dst.tokens * hb];
  }
  // Rows contiguous on both sides become one wider row; reps of one row likewise.
  if (rows > 1 && srcPitch === width && dstPitch === width) [width, rows, srcPitch, dstPitch] = [width * rows, 1, width * rows, width * rows];
  if (reps > 1 && rows === 1 && srcRepStride === width && dstRepStride === width) [width, reps, srcRepStride, dstRepStride] = [width * reps, 1, 0, 0];
  return {
    srcOffset: offsetOf(src, 0, slice.srcOffset),
    dstOffset: offsetOf(dst, 0, slice.dstOffset),
    subStride: offsetOf(dst, T, 0),
    width,
    rows,
    srcPitch,
    dstPitch,
    reps,
    srcRepStride,
    dstRepStride,
    bytes: width * rows * reps,
    srcContiguous: contiguous(width, rows, srcPitch, reps, srcRepStride),
    dstContiguous: contiguous(width, rows, dstPitch, reps, dstRepStride),
  };
}

/** How a destination's pieces travel: one range each way, gathered in staging first, or staged on the destination and scattered there. */
export type SliceRoute = 'direct' | 'gather' | 'ring';

export function routeOf(c: SliceCopy): SliceRoute {
  if (c.srcContiguous && c.dstContiguous) return 'direct';
  return c.dstContiguous ? 'gather' : 'ring';
}
