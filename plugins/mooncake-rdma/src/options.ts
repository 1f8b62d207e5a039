import type { OptionsOf } from '@te/connector';
import { fabricOptionsSchema } from '@te/fabric';

/** mooncake-rdma's runtime parameters: the libfabric layer's, under TE_RDMA_*. */
export const rdmaOptions = fabricOptionsSchema('TE_RDMA');
export type RdmaOptions = OptionsOf<typeof rdmaOptions>;
