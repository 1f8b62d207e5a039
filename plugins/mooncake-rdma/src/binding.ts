/** Loads the mooncake-rdma addon (its surface is declared in @te/fabric's native-types). */
import { fileURLToPath } from 'node:url';
import { loadFabricAddon, type NativeFabricModule } from '@te/fabric';

export const PLUGIN_NAME = 'mooncake-rdma';

let cached: NativeFabricModule | undefined;

export function loadBinding(): NativeFabricModule {
  cached ??= loadFabricAddon({
    plugin: PLUGIN_NAME,
    addon: 'te_mooncake_rdma.node',
    envOverride: 'TE_MOONCAKE_RDMA_ADDON',
    packageRoot: fileURLToPath(new URL('..', import.meta.url)),
    workspace: '@te/mooncake-rdma',
  });
  return cached;
}
