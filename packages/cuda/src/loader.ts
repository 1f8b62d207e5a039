import { loadNativeAddon } from '@te/connector';

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
}

/**
 * Returns a memoised loader for a CUDA addon. A failure lists the paths tried and how to
 * fix it. The addon itself loads without a GPU (cudart is static, libcuda is dlopen'ed).
 */
export function addonLoader<T extends { setErrorFactory(f: (status: number, message: string) => Error): void }>(spec: AddonSpec): () => T {
  let cached: T | undefined;
  return () =>
    (cached ??= loadNativeAddon<T>({
      plugin: spec.plugin,
      file: spec.addon,
      packageRoot: spec.root,
      envVar: spec.envVar,
      solutions: [`build it: \`npm run build:native -w ${spec.pkg}\` (needs cmake >= 3.18 and g++; the CUDA toolkit at /usr/local/cuda for GPU support)`],
    }));
}
