/** Loads the barex addon (its native surface is declared in @te/fabric's native-types). */
import { fileURLToPath } from 'node:url';
import { loadFabricAddon, type NativeFabricModule } from '@te/fabric';

export const PLUGIN_NAME = 'barex';

let cached: NativeFabricModule | undefined;

export function loadBinding(): NativeFabricModule {
  cached ??= loadFabricAddon({
    plugin: PLUGIN_NAME,
    addon: 'te_barex.node',
    envOverride: 'TE_BAREX_ADDON',
    packageRoot: fileURLToPath(new URL('..', import.meta.url)),
    workspace: '@te/barex',
  });
  return cached;
}
