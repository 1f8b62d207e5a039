import { resolve as resolveFromCwd } from 'node:path';
import { PluginRegistry, TransferError, loadConfig, type TeConfig } from '@te/connector';

/** What a command's flags say about the engine; everything else comes from the environment and $TE_CONFIG. */
export interface CommandFlags {
  plugin?: string;
  modulePath?: string;
  bindAddress?: string;
  port?: number;
  transportOptions?: Record<string, unknown>;
}

function resolvePath(modulePath: string): string {
  return modulePath.startsWith('.') ? resolveFromCwd(modulePath) : modulePath;
}

/**
 * The one configuration path of every `te` command (and the same `loadConfig` that
 * `createKVManager` uses): defaults, $TE_CONFIG, the environment (TE_*, MC_*), then the
 * flags. Whatever `te doctor` rejects, every command rejects. A module path names its own
 * plugin, so `--module-path` needs no `--plugin`.
 */
export async function commandConfig(flags: CommandFlags, env: NodeJS.ProcessEnv = process.env): Promise<TeConfig> {
  const overrides: Record<string, unknown> = {};
  const modulePath = flags.modulePath ?? env.TE_MODULE_PATH;
  if (flags.modulePath) overrides.modulePath = resolvePath(flags.modulePath);
  let connector = flags.plugin;
  if (!connector && modulePath && !env.TE_CONNECTOR) {
    try {
      connector = (await new PluginRegistry({ builtins: false }).loadModulePath(resolvePath(modulePath))).name;
    } catch (e) {
      throw new TransferError('INVALID_CONFIG', `Cannot load the plugin at module path ${modulePath}: ${(e as Error).message}`, { cause: e });
    }
  }
  if (connector) overrides.connector = connector;
  else if (!env.TE_CONNECTOR && !env.TE_CONFIG) overrides.connector = 'mooncake-tcp';
  if (flags.bindAddress) overrides.bindAddress = flags.bindAddress;
  if (flags.port !== undefined) overrides.metadata = { port: flags.port };
  const config = loadConfig({ env, overrides });
  if (flags.transportOptions)
    config.transportOptions = { ...config.transportOptions, [config.connector]: { ...config.transportOptions[config.connector], ...flags.transportOptions } };
  return config;
}
