/**
 * Which part of a tensor-parallel-sharded dimension (KV heads, or a state tensor's
 * sharded units) one rank holds, and which slice a source rank sends to a destination
 * rank when the two sides use different TP sizes.
 *
 * With `total` units over `tp` ranks each rank holds `max(1, total / tp)` units. When
 * tp > total (GQA replication) `tp / total` consecutive ranks hold the same units.
 */
export interface ShardRange {
  /** First unit held. */
  readonly first: number;
  /** Units held. */
  readonly count: number;
}

export function shardOfRank(total: number, tp: number, rank: number): ShardRange {
  if (!Number.isInteger(total) || total < 1) throw new RangeError(`sharded unit count must be a positive integer, got ${total}`);
  if (!Number.isInteger(tp) || tp < 1) throw new RangeError(`TP size must be a positive integer, got ${tp}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= tp) throw new RangeError(`TP rank ${rank} is outside [0, ${tp})`);
  if (tp >= total) {
    if (tp % total !== 0) throw new RangeError(`TP size ${tp} is not a multiple of ${total} units`);
    const replication = tp / total;
    return { first: Math.floor(rank / replication), count: 1 };
  }
  if (total % tp !== 0) throw new RangeError(`${total} units do not divide evenly over TP size ${tp}`);
  const count = total / tp;
  return { first: rank * count, count };
}

/** What one source rank copies into one destination rank; `count` 0 means it sends nothing. */
export interface ShardSlice {
  /** Offset, in units, inside the source rank's shard. */
  readonly srcOffset: number;
  /** Offset, in units, inside the destination rank's shard. */
  readonly dstOffset: number;
  readonly count: number;
}

/**
 * Splits a destination rank's shard among its source ranks (in the given order). Each
 * unit is sent by exactly one source: the first that holds it. Sources that hold nothing
 * still needed (replicas, or units already covered) get `count` 0: dummies that send
 * nothing and only report success.
 */
export function planShardSlices(total: number, srcTp: number, dstTp: number, dstRank: number, srcRanks: readonly number[]): ShardSlice[] {
  const want = shardOfRank(total, dstTp, dstRank);
  let covered = want.first; // units [want.first, covered) already assigned
  const end = want.first + want.count;
  return srcRanks.map((rank) => {
    const have = shardOfRank(total, srcTp, rank);
    const lo = Math.max(covered, have.first);
    const hi = Math.min(end, have.first + have.count);
    if (hi <= lo || lo !== covered) return { srcOffset: 0, dstOffset: 0, count: 0 };
    covered = hi;
    return { srcOffset: lo - have.first, dstOffset: lo - want.first, count: hi - lo };
  });
}

/** Whether the slices cover the destination shard completely (a layout the runtime can serve). */
export function slicesCover(total: number, dstTp: number, dstRank: number, slices: readonly ShardSlice[]): boolean {
  const want = shardOfRank(total, dstTp, dstRank).count;
  return slices.reduce((n, s) => n + s.count, 0) === want;
}
