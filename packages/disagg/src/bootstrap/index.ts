export { BootstrapServer, startBootstrapServer, type BootstrapServerOptions } from './server.js';
export { BootstrapClient } from './client.js';
export type { RankRegistration, PrefillInfo, RankEndpoint } from './schema.js';
export { EtcdRankDirectory } from './etcd-directory.js';
export type { RankDirectory, DecodeDescription } from './directory.js';
