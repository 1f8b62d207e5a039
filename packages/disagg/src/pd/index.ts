export { createKVManager, type CreateKVManagerOptions, type DisaggKVManager, type RingStats } from './create.js';
export type { StagingStats } from './kv-write.js';
export { resolveStaging, type StagingOptions, type ResolvedStaging } from '../staging/options.js';
export { BytePool } from '../staging/byte-pool.js';
export { LayerwiseBatch, layerwiseEnabled, type BatchEntry, type LayerwiseStats, type RoomResult } from './layerwise.js';
export { resolveTimeouts, DEFAULT_PD_TIMEOUTS, type PDTimeouts } from './timeouts.js';
export { planTargets, type TargetPlan, type TargetSet } from './targets.js';
export {
  BootstrapServer,
  startBootstrapServer,
  BootstrapClient,
  EtcdRankDirectory,
  type BootstrapServerOptions,
  type PrefillInfo,
  type RankRegistration,
  type RankEndpoint,
  type RankDirectory,
  type DecodeDescription,
} from '../bootstrap/index.js';
export type { BootstrapStore } from '../bootstrap/directory-for.js';
export * from '../plan/index.js';
export { MSG as PD_MESSAGES, PD_PROTOCOL_VERSION } from '../protocol/index.js';
