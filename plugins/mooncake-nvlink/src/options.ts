import type { OptionsOf, OptionsSchema } from '@te/connector';

/**
 * Runtime parameters of mooncake-nvlink, with defaults and the environment variable that
 * sets each one (explicit config > environment > default).
 */
export const nvlinkOptions = {
  handleType: {
    type: 'enum',
    values: ['fabric', 'posix-fd'],
    default: 'fabric',
    env: 'TE_NVLINK_HANDLE_TYPE',
    description:
      'How allocations are shared: "fabric" (CU_MEM_HANDLE_TYPE_FABRIC, multi-node NVLink with IMEX) or "posix-fd" (file descriptors over a unix socket; one machine, e.g. a single-GPU test of the same VMM path)',
  },
  streamsPerDevice: {
    type: 'integer',
    default: 4,
    min: 1,
    max: 64,
    env: 'TE_NVLINK_STREAMS',
    description: 'Non-blocking CUDA streams per local GPU that copies are spread over',
  },
  sliceBytes: {
    type: 'integer',
    default: 67108864,
    min: 0,
    max: 17179869184,
    env: 'TE_NVLINK_SLICE_BYTES',
    description: 'Requests longer than this are cut into slices issued round-robin on the streams (0 = never cut)',
  },
} as const satisfies OptionsSchema;

export type NvlinkOptions = OptionsOf<typeof nvlinkOptions>;
