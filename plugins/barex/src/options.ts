import type { OptionsOf, OptionsSchema } from '@te/connector';
import { fabricOptionsSchema } from '@te/fabric';

/** The prefix of barex's environment variables. */
export const ENV_PREFIX = 'TE_BAREX';

/** barex options: the libfabric options (TE_BAREX_*) plus the pool. */
export const barexOptions = {
  ...fabricOptionsSchema(ENV_PREFIX),
  poolSize: {
    type: 'integer',
    default: 256 * 1024 * 1024,
    min: 4096,
    max: 2 ** 50,
    env: 'TE_BAREX_POOL_SIZE',
    description:
      'Bytes of the pre-registered pool all transfer memory is allocated from (a multiple of 4096; one pool per process, created by the first barex transport)',
  },
  allowExternalMemory: {
    type: 'boolean',
    default: false,
    env: 'TE_BAREX_ALLOW_EXTERNAL',
    description:
      'Also register memory outside the pool (each buffer individually, as mooncake-rdma does). Off: such registrations are refused, which is the BAREX model',
  },
} as const satisfies OptionsSchema;

export type BarexOptions = OptionsOf<typeof barexOptions>;
