export { KVConnectorScheduler, type SchedulerOptions } from './scheduler.js';
export { KVConnectorWorker, type WorkerOptions } from './worker.js';
export type { KVTransferParams, LayerCache, KVConnectorMeta, KVRequestView } from './types.js';
