import type { OptionsOf } from '@te/connector';
import { fabricOptionsSchema } from '@te/fabric';

/** The prefix of mooncake-rdma's environment variables. */
export const ENV_PREFIX = 'TE_RDMA';

/** mooncake-rdma's runtime parameters: the libfabric layer's, under TE_RDMA_*. */
export const rdmaOptions = fabricOptionsSchema(ENV_PREFIX);
export type RdmaOptions = OptionsOf<typeof rdmaOptions>;
