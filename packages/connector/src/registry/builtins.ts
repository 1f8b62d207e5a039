/** Built-in connector names and the packages that provide them, loaded only when used. */
export const BUILTIN_PLUGINS: Readonly<Record<string, string>> = Object.freeze({
  'mooncake-tcp': '@te/mooncake-tcp',
  'mooncake-rdma': '@te/mooncake-rdma',
  'mooncake-nvlink': '@te/mooncake-nvlink',
  'mooncake-intra-nvlink': '@te/mooncake-intra-nvlink',
  barex: '@te/barex',
  'mooncake-shm': '@te/mooncake-shm',
});

/**
 * The built-ins the engine suggests where no transport of an engine registers memory of a
 * kind (its MEMORY_KIND_UNSUPPORTED hints).
 */
export const MEMORY_KIND_PROVIDERS = Object.freeze({
  device: 'mooncake-intra-nvlink, mooncake-nvlink, or mooncake-tcp built with CUDA',
  rawHost: 'mooncake-tcp, mooncake-rdma',
  host: 'mooncake-tcp, mooncake-rdma',
  hostAllocator: 'mooncake-shm, barex',
} as const);

/**
 * The built-in that provides what each of Mooncake's environment switches asks for
 * (MC_FORCE_TCP, MC_INTRANODE_NVLINK, MC_FORCE_MNNVL). With BUILTIN_PLUGINS and MEMORY_KIND_PROVIDERS,
 * the only place @te/connector names a plugin; everything else is decided from capabilities.
 */
export const SWITCH_PROVIDERS = Object.freeze({
  forceTcp: 'mooncake-tcp',
  intranodeNvlink: 'mooncake-intra-nvlink',
  forceMnnvl: 'mooncake-nvlink',
} as const);
