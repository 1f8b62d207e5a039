import { loadNativeAddon } from '@te/connector';
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
