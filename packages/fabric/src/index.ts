// @te/fabric: the libfabric layer the RDMA plugins share (mooncake-rdma, barex), over native/fabric.
export { fabricOptionsSchema, type FabricOptions } from './options.js';
export { FabricTransport, mrModeNames, nativeOptions, type FabricEndpoint, type SegmentHealth } from './fabric-transport.js';
export { loadFabricAddon, requireLibfabric, INSTALL_LIBFABRIC } from './load-addon.js';
export { probeFabric, probeFabricFromEnv } from './probe.js';
export type * from './native-types.js';
