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
 * The built-in that provides what each of Mooncake's environment switches asks for
 * (MC_FORCE_TCP, MC_INTRANODE_NVLINK, MC_FORCE_MNNVL). With BUILTIN_PLUGINS, the only place
 * @te/connector names a plugin; everything else is decided from capabilities.
 */
export const SWITCH_PROVIDERS = Object.freeze({
  forceTcp: 'mooncake-tcp',
  intranodeNvlink: 'mooncake-intra-nvlink',
  forceMnnvl: 'mooncake-nvlink',
} as const);
