export { BootstrapServer, startBootstrapServer, type BootstrapServerOptions } from './server.js';
export { BootstrapClient } from './client.js';
export type { RankRegistration, PrefillInfo, RankEndpoint } from './schema.js';
