import type { OptionsOf, OptionsSchema } from '@te/connector';

/**
 * Runtime parameters of mooncake-intra-nvlink, with defaults and the environment variable
 * that sets each one (explicit config > environment > default).
 */
export const intraNvlinkOptions = {
  streamsPerDevice: {
    type: 'integer',
    default: 4,
    min: 1,
    max: 64,
    env: 'TE_INTRA_NVLINK_STREAMS',
    description: 'Non-blocking CUDA streams per local GPU that copies are spread over (several batches and slices in flight)',
  },
  sliceBytes: {
    type: 'integer',
    default: 67108864,
    min: 0,
    max: 17179869184,
    env: 'TE_INTRA_NVLINK_SLICE_BYTES',
    description: 'Requests longer than this are cut into slices issued round-robin on the streams (0 = never cut)',
  },
} as const satisfies OptionsSchema;

export type IntraNvlinkOptions = OptionsOf<typeof intraNvlinkOptions>;
