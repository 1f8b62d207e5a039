import { transportsOf } from '../config/load.js';
import type { TeConfig } from '../config/types.js';
import { SWITCH_PROVIDERS } from '../registry/builtins.js';
import type { PluginRegistry } from '../registry/registry.js';
import { parseOptions, type OptionsOf, type OptionsSchema } from '../spi/options.js';
import type { TransportPlugin } from '../spi/plugin.js';

/** The plugins an engine with `config` runs: the connector, the configured transports, and the switches' needs. */
export async function loadPlugins(config: TeConfig, registry: PluginRegistry): Promise<TransportPlugin[]> {
  const names = transportsOf(config);
  const plugins: TransportPlugin[] = [await registry.resolve(config)];
  for (const name of names.slice(1)) plugins.push(await registry.load(name));
  // MC_FORCE_TCP needs a TCP-class transport: any plugin of that class (a third party's too) will do.
  if (config.forceTcp && !plugins.some((p) => p.capabilities.class === 'tcp')) plugins.push(await registry.load(SWITCH_PROVIDERS.forceTcp));
  return plugins;
}

/** A plugin's options from the config's `transportOptions` and the environment (INVALID_CONFIG when one is wrong). */
export function optionsOf(plugin: TransportPlugin, config: TeConfig, env: NodeJS.ProcessEnv): OptionsOf<OptionsSchema> {
  return parseOptions(plugin.options, config.transportOptions[plugin.name] ?? {}, env, plugin.name);
}
