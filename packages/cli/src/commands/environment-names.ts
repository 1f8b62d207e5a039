import { closestName, ENVIRONMENT_VARIABLES, type TransportPlugin } from '@te/connector';
import { RUNTIME_ENVIRONMENT_VARIABLES } from '@te/disagg';

/**
 * Variables read outside the engine's config, the runtime and the plugins' option schemas:
 * where each built-in native addon is loaded from (a file that replaces the package's own
 * build), the libfabric layer's debug switch, and the switches of the native build (read when
 * `npm install` compiles the addons).
 */
export const NATIVE_VARIABLES = [
  'TE_MOONCAKE_TCP_ADDON',
  'TE_MOONCAKE_RDMA_ADDON',
  'TE_MOONCAKE_SHM_ADDON',
  'TE_MOONCAKE_WIRE_ADDON',
  'TE_MOONCAKE_NVLINK_ADDON',
  'TE_MOONCAKE_INTRA_NVLINK_ADDON',
  'TE_BAREX_ADDON',
  'TE_STAGING_ADDON',
  'TE_FABRIC_DEBUG',
  'TE_BUILD_JOBS',
  'TE_FABRIC_DISABLE',
  'TE_LIBFABRIC_INCLUDE',
  'TE_LIBFABRIC_LIB',
  'TE_NATIVE_DEBUG',
  'TE_UNITY_BUILD',
  'TE_WITH_CUDA',
] as const;

/** A TE_ or MC_ variable that is set, that te does not read, and the name it most likely meant. */
export interface UnreadVariable {
  name: string;
  meant: string;
}

/** Every TE_/MC_ name te reads at run time and build time, with `plugins`' options. */
export function knownVariables(plugins: readonly TransportPlugin[]): string[] {
  const names = new Set<string>([...Object.keys(ENVIRONMENT_VARIABLES), ...Object.keys(RUNTIME_ENVIRONMENT_VARIABLES), ...NATIVE_VARIABLES]);
  for (const plugin of plugins) for (const spec of Object.values(plugin.options ?? {})) if (spec.env) names.add(spec.env);
  return [...names];
}

/**
 * The TE_ and MC_ variables set in `env` that te does not read, where a name it does read is
 * within two edits: most likely a typo, whose value is silently ignored (a misspelt
 * TE_SECRET leaves the control plane open). A name with no near match is left alone: te's own
 * benchmarks and tests read variables of their own, and other software may use the prefixes.
 */
export function unreadVariables(env: NodeJS.ProcessEnv, known: readonly string[]): UnreadVariable[] {
  const knownSet = new Set(known);
  const out: UnreadVariable[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!/^(TE|MC)_/.test(name) || knownSet.has(name) || env[name] === undefined) continue;
    const meant = closestName(name, known);
    if (meant) out.push({ name, meant });
  }
  return out;
}
