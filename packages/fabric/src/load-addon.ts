import { TransferError, loadNativeAddon } from '@te/connector';
import type { NativeFabricModule } from './native-types.js';

export const INSTALL_LIBFABRIC = 'apt-get install -y libfabric-dev libfabric-bin';

/** Loads a libfabric plugin's addon from its package; a failure lists the paths tried and how to fix it. */
export function loadFabricAddon(options: { plugin: string; addon: string; envOverride: string; packageRoot: string; workspace: string }): NativeFabricModule {
  return loadNativeAddon<NativeFabricModule>({
    plugin: options.plugin,
    file: options.addon,
    packageRoot: options.packageRoot,
    envVar: options.envOverride,
    solutions: [
      `build it: \`npm run build:native -w ${options.workspace}\` (needs cmake >= 3.18, g++ and, for a working transport, libfabric: ${INSTALL_LIBFABRIC})`,
    ],
  });
}

/** What to tell the user of plugin `plugin` whose addon was built without libfabric. */
export function builtWithoutLibfabric(plugin: string): string {
  return `${plugin} was built without libfabric (libfabric-dev was missing at build time): ${INSTALL_LIBFABRIC}, then rebuild (npm rebuild @te/${plugin}, or npm run build:native -w @te/${plugin})`;
}

/** Throws PROVIDER_UNAVAILABLE (saying what to install) when `native` was built without libfabric. */
export function requireLibfabric(native: Pick<NativeFabricModule, 'builtWithLibfabric'>, plugin: string): void {
  if (!native.builtWithLibfabric) throw new TransferError('PROVIDER_UNAVAILABLE', builtWithoutLibfabric(plugin), { plugin });
}
