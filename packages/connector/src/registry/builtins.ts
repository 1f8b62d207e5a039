/** Built-in connector names and the packages that provide them, loaded only when used. */
export const BUILTIN_PLUGINS: Readonly<Record<string, string>> = Object.freeze({
  'mooncake-tcp': '@te/mooncake-tcp',
  'mooncake-rdma': '@te/mooncake-rdma',
  'mooncake-nvlink': '@te/mooncake-nvlink',
  'mooncake-intra-nvlink': '@te/mooncake-intra-nvlink',
  barex: '@te/barex',
});
