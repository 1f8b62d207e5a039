export { mergePageRuns, type PageRuns } from './page-runs.js';
export { shardOfRank, planShardSlices, slicesCover, type ShardRange, type ShardSlice } from './shard-slice.js';
export {
  resolveRankTargets,
  targetPrefillTpRanks,
  targetPrefillPpRanks,
  prefillDpRankFor,
  type RankTargets,
  type PrefillShape,
  type DecodeRankShape,
} from './rank-mapping.js';
export { planCopy, type BufferTable, type CopyPlan, type CopyPlanInput, type UnitSlice } from './copy-plan.js';
export { kvBufferPairs, identityPairs, type LayerSpan, type AttentionKind } from './layer-pairs.js';
export { DescriptorWriter, toSafeNumber } from './descriptor-writer.js';
export { offsetOf, itemBytes, geometryOf, type PageGeometry, type PageLayout } from './page-geometry.js';
export { planSliceCopy, routeOf, type HeadSlice, type SliceCopy, type SliceRoute } from './slice-copy.js';
export {
  pieceCount,
  pieceDestination,
  checkPieces,
  directBatch,
  pageRowsBatch,
  stagedBatch,
  packedBatch,
  gatherCopies,
  scatterCopies,
  type PieceSet,
  type CopySink,
} from './slice-pieces.js';
