/** Loads the mooncake-rdma addon (declared in native-types.ts). */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TransferError } from '@te/connector';
import type { NativeFabricModule } from './native-types.js';

export const PLUGIN_NAME = 'mooncake-rdma';
export const INSTALL_LIBFABRIC = 'apt-get install -y libfabric-dev libfabric-bin';

/** Loads an addon once per path; a failure lists the paths tried and how to fix it. */
export function loadFabricAddon(options: { plugin: string; addon: string; envOverride: string; packageRoot: string; workspace: string }): NativeFabricModule {
  const { plugin, addon, envOverride, packageRoot, workspace } = options;
  const candidates = [process.env[envOverride], join(packageRoot, 'build', 'Release', addon), join(packageRoot, 'build', 'Debug', addon)].filter(
    (p): p is string => typeof p === 'string' && p.length > 0,
  );
  const require = createRequire(import.meta.url);
  const problems: string[] = [];
  for (const path of candidates) {
    if (!existsSync(path)) {
      problems.push(`${path}: not found`);
      continue;
    }
    try {
      const mod = require(path) as NativeFabricModule;
      mod.setErrorFactory((status, message) => TransferError.fromStatus(status, message, { plugin }));
      return mod;
    } catch (e) {
      problems.push(`${path}: ${(e as Error).message}`);
    }
  }
  throw new TransferError(
    'PLUGIN_LOAD_FAILED',
    `cannot load the native addon ${addon}. Tried:\n  ${problems.join('\n  ')}\n` +
      'Possible solutions:\n' +
      `  - build it: \`npm run build:native -w ${workspace}\` (needs cmake >= 3.18, g++ and, for a working transport, libfabric: ${INSTALL_LIBFABRIC})\n` +
      '  - reinstall so the install script runs: `npm ci` at the repository root (do not pass --ignore-scripts)\n' +
      `  - point ${envOverride} at a built ${addon}`,
    { plugin },
  );
}

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
