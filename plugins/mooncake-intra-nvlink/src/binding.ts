/**
 * The native surface of mooncake-intra-nvlink: the one place that loads the addon. Its
 * shape (shared with mooncake-nvlink) is declared in ./cuda/native-types.ts.
 */
import { fileURLToPath } from 'node:url';
import { addonLoader } from '@te/cuda';
import type { NativeCudaModule } from '@te/cuda';

export const PLUGIN_NAME = 'mooncake-intra-nvlink';

/** The package root (src/ and dist/ are both one level below it). */
export function packageRoot(): string {
  return fileURLToPath(new URL('..', import.meta.url));
}

/** Loads the addon once (it loads without a GPU; ask `probe()` whether one is usable). */
export const loadBinding: () => NativeCudaModule = addonLoader<NativeCudaModule>({
  plugin: PLUGIN_NAME,
  pkg: '@te/mooncake-intra-nvlink',
  addon: 'te_mooncake_intra_nvlink.node',
  envVar: 'TE_MOONCAKE_INTRA_NVLINK_ADDON',
  root: packageRoot(),
});
