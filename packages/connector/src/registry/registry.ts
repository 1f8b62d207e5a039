import { TransferError } from '../errors/transfer-error.js';
import { PLUGIN_NAME_PATTERN, validatePlugin, type TransportPlugin } from '../spi/plugin.js';
import { BUILTIN_PLUGINS } from './builtins.js';
import { importPluginModule, pluginExportOf } from './load-module.js';

/** How a registered name is satisfied: a module to import, a loader, or a plugin object. */
export type PluginSource = string | (() => Promise<unknown>) | TransportPlugin;

export interface PluginRegistryOptions {
  /** Register the built-in connector names (default true). */
  builtins?: boolean;
  /** Directory module paths and package names are resolved from (default: process.cwd()). */
  baseDir?: string;
}

/**
 * Maps connector names to transport plugins, loaded lazily on first use (vLLM's
 * KVConnectorFactory model): registering costs nothing, duplicates are refused, and a
 * `modulePath` loads an out-of-tree plugin without registering anything.
 */
export class PluginRegistry {
  private readonly sources = new Map<string, PluginSource>();
  private readonly loaded = new Map<string, Promise<TransportPlugin>>();
  private readonly baseDir: string | undefined;

  constructor(options: PluginRegistryOptions = {}) {
    this.baseDir = options.baseDir;
    if (options.builtins !== false) {
      for (const [name, pkg] of Object.entries(BUILTIN_PLUGINS)) this.sources.set(name, pkg);
    }
  }

  /**
   * Adds a name; a name already taken is a PLUGIN_DUPLICATE error. A name no plugin could
   * declare, or a source that is not a module name, a loader or an object, is refused here
   * (INVALID_ARGUMENT) rather than at the first load, which may come much later.
   */
  register(name: string, source: PluginSource): void {
    if (typeof name !== 'string' || !PLUGIN_NAME_PATTERN.test(name))
      throw new TransferError(
        'INVALID_ARGUMENT',
        `Expected a plugin name to be a lower-case identifier (${String(PLUGIN_NAME_PATTERN)}), got ${describe(name)}`,
      );
    if (!(typeof source === 'string' ? source.length > 0 : typeof source === 'function' || (typeof source === 'object' && source !== null)))
      throw new TransferError(
        'INVALID_ARGUMENT',
        `Expected plugin "${name}"'s source to be a package name or file path, a loader function or a plugin object, got ${describe(source)}`,
      );
    if (this.sources.has(name)) {
      const existing = this.sources.get(name);
      const from = typeof existing === 'string' ? ` (provided by ${existing})` : '';
      throw new TransferError(
        'PLUGIN_DUPLICATE',
        `A plugin named "${name}" is already registered${from}; pick another name or use \`modulePath\` to load a specific module`,
        { details: { name } },
      );
    }
    this.sources.set(name, source);
  }

  has(name: string): boolean {
    return this.sources.has(name);
  }

  names(): string[] {
    return [...this.sources.keys()].sort();
  }

  /** The package or description behind a name, for `te doctor`. */
  sourceOf(name: string): string | undefined {
    const s = this.sources.get(name);
    if (s === undefined) return undefined;
    return typeof s === 'string' ? s : typeof s === 'function' ? '(loader function)' : `(plugin object ${s.name})`;
  }

  /** Loads (once) and validates the plugin registered under `name`. */
  load(name: string): Promise<TransportPlugin> {
    let p = this.loaded.get(name);
    if (!p) {
      p = this.loadUncached(name);
      this.loaded.set(name, p);
      // A failed load is not cached: the user may install the package and retry.
      p.catch(() => this.loaded.delete(name));
    }
    return p;
  }

  private async loadUncached(name: string): Promise<TransportPlugin> {
    const source = this.sources.get(name);
    if (source === undefined) {
      throw new TransferError(
        'PLUGIN_UNKNOWN',
        `Unknown connector "${name}". Known connectors: ${this.names().join(', ') || '(none)'}. To use a third-party plugin, set \`modulePath\` (TE_MODULE_PATH) to its package name or file, or call registerPlugin("${name}", "<package>")`,
        { details: { name, known: this.names() } },
      );
    }
    let candidate: unknown;
    let where: string;
    if (typeof source === 'string') {
      where = `package ${source}`;
      try {
        candidate = pluginExportOf((await importPluginModule(source, this.baseDir)).module);
      } catch (error) {
        throw new TransferError(
          'PLUGIN_LOAD_FAILED',
          `Connector "${name}" is provided by ${source}, which could not be loaded. Install it (npm install ${source}) or fix its build.\n${(error as Error).message}`,
          { cause: error, details: { name, package: source } },
        );
      }
    } else if (typeof source === 'function') {
      where = `the loader registered for "${name}"`;
      try {
        const m = await source();
        candidate = typeof m === 'object' && m !== null && !('create' in m) ? pluginExportOf(m as Record<string, unknown>) : m;
      } catch (error) {
        throw new TransferError('PLUGIN_LOAD_FAILED', `The loader registered for connector "${name}" failed: ${(error as Error).message}`, { cause: error });
      }
    } else {
      where = `the plugin object registered as "${name}"`;
      candidate = source;
    }
    const plugin = validatePlugin(candidate, where);
    if (plugin.name !== name) {
      throw new TransferError('PLUGIN_INVALID', `${where} declares the name "${plugin.name}" but is registered as "${name}"`, { plugin: plugin.name });
    }
    return plugin;
  }

  /** Loads a plugin from a package name or file path (config `modulePath`). */
  async loadModulePath(modulePath: string, expectedName?: string): Promise<TransportPlugin> {
    if (typeof modulePath !== 'string' || modulePath.length === 0)
      throw new TransferError('INVALID_CONFIG', `Expected \`modulePath\` to be a package name or file path, got ${describe(modulePath)}`);
    const { module, resolved } = await importPluginModule(modulePath, this.baseDir);
    const plugin = validatePlugin(pluginExportOf(module), `module ${modulePath} (${resolved})`);
    if (expectedName !== undefined && plugin.name !== expectedName) {
      throw new TransferError('PLUGIN_INVALID', `module ${modulePath} provides plugin "${plugin.name}", but the config names connector "${expectedName}"`, {
        plugin: plugin.name,
      });
    }
    return plugin;
  }

  /** Resolves a config's connector: `modulePath` wins over the name table. */
  resolve(config: { connector: string; modulePath?: string }): Promise<TransportPlugin> {
    if (typeof config !== 'object' || config === null)
      return Promise.reject(new TransferError('INVALID_ARGUMENT', `Expected a config with \`connector\` to resolve, got ${describe(config)}`));
    return config.modulePath ? this.loadModulePath(config.modulePath, config.connector) : this.load(config.connector);
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  return typeof value === 'string' ? JSON.stringify(value.slice(0, 100)) : typeof value;
}

const DEFAULT_REGISTRY = Symbol.for('te.defaultPluginRegistry');

/** The process-wide registry (shared by ESM and CJS copies of this package). */
export function defaultRegistry(): PluginRegistry {
  const g = globalThis as Record<symbol, PluginRegistry | undefined>;
  return (g[DEFAULT_REGISTRY] ??= new PluginRegistry());
}

/** Registers a plugin name in the process-wide registry. */
export function registerPlugin(name: string, source: PluginSource): void {
  defaultRegistry().register(name, source);
}
