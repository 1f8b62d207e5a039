export { createKVManager, type CreateKVManagerOptions, type DisaggKVManager } from './create.js';
export { LayerwiseBatch, layerwiseEnabled, type BatchEntry, type LayerwiseStats, type RoomResult } from './layerwise.js';
export { resolveTimeouts, DEFAULT_PD_TIMEOUTS, type PDTimeouts } from './timeouts.js';
export { planTargets, type TargetPlan, type TargetSet } from './targets.js';
export { BootstrapServer, startBootstrapServer, BootstrapClient, EtcdRankDirectory, type BootstrapServerOptions, type PrefillInfo, type RankRegistration, type RankEndpoint, type RankDirectory, type DecodeDescription } from '../bootstrap/index.js';
export type { BootstrapStore } from '../bootstrap/directory-for.js';
export * from '../plan/index.js';
export { MSG as PD_MESSAGES, PD_PROTOCOL_VERSION } from '../protocol/index.js';
