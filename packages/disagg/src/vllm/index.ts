export { KVConnectorScheduler, type SchedulerOptions } from './scheduler.js';
export { KVConnectorWorker, type WorkerOptions, type LayerCache } from './worker.js';
export type { KVTransferParams, KVConnectorMeta, KVRequestView } from './types.js';
