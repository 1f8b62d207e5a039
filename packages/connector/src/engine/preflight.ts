import type { TeConfig, TeConfigInput } from '../config/types.js';
import { validateConfig } from '../config/validate.js';
import type { TransferErrorCode } from '../errors/codes.js';
import { isTransferError } from '../errors/transfer-error.js';
import { etcdCall, openEtcdClient } from '../metadata/etcd-client.js';
import { segmentKeyPrefix } from '../metadata/etcd-store.js';
import { type PluginRegistry, defaultRegistry } from '../registry/registry.js';
import { ControlServer } from './control-plane.js';
import { loadPlugins, optionsOf } from './load-plugins.js';

/** One thing an engine needs at start, tried the way the engine does it. */
export interface PreflightCheck {
  /**
   * `plugins`: every transport the engine would run loads and its options parse (config and
   * environment); `bind`: the control endpoint on `bindAddress` and the handshake port;
   * `metadata`: etcd answers (etcd metadata only).
   */
  name: 'plugins' | 'bind' | 'metadata';
  ok: boolean;
  /** What was found (ok), or what went wrong and what to change. */
  detail: string;
  /** The code an engine's start would fail with (only when not ok). */
  code?: TransferErrorCode;
}

export interface PreflightOptions {
  /** Where plugins are looked up (default: the process's registry, as for an engine). */
  registry?: PluginRegistry;
  /** The environment plugin options are read from (default: `process.env`, as for an engine). */
  env?: NodeJS.ProcessEnv;
}

/**
 * What an engine with `config` would find at start, short of starting one: its plugins
 * loaded and their options parsed, its control endpoint bound on the configured address and
 * port (an address of another machine, a port another process holds), and with etcd
 * metadata, etcd answering within the handshake deadline. `te doctor` prints these; a
 * framework may call it before it commits to a config. Nothing is left behind: no transport
 * is created, the endpoint is closed again and no key is written. A config that does not
 * validate is refused as `createTransferEngine` refuses it (INVALID_CONFIG, thrown).
 */
export async function preflight(input: TeConfig | TeConfigInput, options: PreflightOptions = {}): Promise<PreflightCheck[]> {
  const config = validateConfig(input);
  const checks = [await checkPlugins(config, options), await checkBind(config)];
  if (config.metadata.type === 'etcd') checks.push(await checkEtcd(config));
  return checks;
}

function failed(name: PreflightCheck['name'], error: unknown): PreflightCheck {
  return {
    name,
    ok: false,
    detail: (error as Error)?.message ?? String(error),
    code: isTransferError(error) ? error.code : 'INTERNAL',
  };
}

async function checkPlugins(config: TeConfig, options: PreflightOptions): Promise<PreflightCheck> {
  try {
    const plugins = await loadPlugins(config, options.registry ?? defaultRegistry());
    for (const plugin of plugins) optionsOf(plugin, config, options.env ?? process.env);
    return { name: 'plugins', ok: true, detail: `${plugins.map((p) => p.name).join(', ')} loaded; their options are valid` };
  } catch (error) {
    return failed('plugins', error);
  }
}

async function checkBind(config: TeConfig): Promise<PreflightCheck> {
  const server = new ControlServer();
  try {
    const endpoint = await server.bind(config.bindAddress, config.metadata.port);
    const which = config.metadata.port === 0 ? ' (port 0: an engine takes any free port)' : '';
    return { name: 'bind', ok: true, detail: `the control endpoint binds on ${endpoint}${which}` };
  } catch (error) {
    return failed('bind', error);
  } finally {
    await server.close();
  }
}

async function checkEtcd(config: TeConfig): Promise<PreflightCheck> {
  const { endpoints, prefix } = config.metadata;
  const ms = config.timeouts.handshakeMs;
  let client;
  try {
    client = await openEtcdClient(endpoints, ms);
    const { kvs } = await etcdCall(endpoints, client.getAll().prefix(segmentKeyPrefix(prefix)).exec(), ms, 'reading the registered segments');
    return { name: 'metadata', ok: true, detail: `etcd at ${endpoints.join(',')} answered: ${kvs.length} segment(s) registered under "${prefix}"` };
  } catch (error) {
    return failed('metadata', error);
  } finally {
    client?.close();
  }
}
