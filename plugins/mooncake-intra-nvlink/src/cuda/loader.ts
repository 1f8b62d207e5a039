import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { TransferError } from '@te/connector';

export interface AddonSpec {
  /** Plugin name, used in errors ("mooncake-intra-nvlink"). */
  plugin: string;
  /** npm package name, for the rebuild hint. */
  pkg: string;
  /** File name of the addon ("te_mooncake_intra_nvlink.node"). */
  addon: string;
  /** Environment variable that points at a built addon (checked first). */
  envVar: string;
  /** The package root (build/Release lies below it). */
  root: string;
  /** import.meta.url of the caller, for createRequire. */
  from: string;
}

/**
 * Returns a memoised loader for a CUDA addon. A failure lists the paths tried and how to
 * fix it. The addon itself loads without a GPU (cudart is static, libcuda is dlopen'ed).
 */
export function addonLoader<T extends { setErrorFactory(f: (status: number, message: string) => Error): void }>(spec: AddonSpec): () => T {
  let cached: T | undefined;
  return () => {
    if (cached) return cached;
    const candidates = [process.env[spec.envVar], join(spec.root, 'build', 'Release', spec.addon), join(spec.root, 'build', 'Debug', spec.addon)].filter(
      (p): p is string => typeof p === 'string' && p.length > 0,
    );
    const require = createRequire(spec.from);
    const problems: string[] = [];
    for (const path of candidates) {
      if (!existsSync(path)) {
        problems.push(`${path}: not found`);
        continue;
      }
      try {
        const mod = require(path) as T;
        mod.setErrorFactory((status, message) => TransferError.fromStatus(status, message, { plugin: spec.plugin }));
        cached = mod;
        return mod;
      } catch (e) {
        problems.push(`${path}: ${(e as Error).message}`);
      }
    }
    throw new TransferError(
      'PLUGIN_LOAD_FAILED',
      `cannot load the native addon ${spec.addon}. Tried:\n  ${problems.join('\n  ')}\n` +
        'Possible solutions:\n' +
        `  - build it: \`npm run build:native -w ${spec.pkg}\` (needs cmake >= 3.18 and g++; the CUDA toolkit at /usr/local/cuda for GPU support)\n` +
        '  - reinstall so the install script runs: `npm ci` at the repository root (do not pass --ignore-scripts)\n' +
        `  - point ${spec.envVar} at a built ${spec.addon}`,
      { plugin: spec.plugin },
    );
  };
}
