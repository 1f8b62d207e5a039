// Assembling an engine: the validated config, the plugins it names, the control endpoint,
// the metadata backend and one transport per plugin. On any failure what was already
// started is closed again, so a failed createTransferEngine leaves no socket or thread.
import { randomBytes } from 'node:crypto';
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import type { TeConfig, TeConfigInput } from '../config/types.js';
import { validateConfig } from '../config/validate.js';
import { defaultRegistry } from '../registry/registry.js';
import { EtcdMetadata } from '../metadata/etcd-store.js';
import { ControlServer } from './control-plane.js';
import { controlKeys } from './control-security.js';
import { loadPlugins, optionsOf } from './load-plugins.js';
import { createLogger, type Log } from './logger.js';
import { P2PHandshake } from './metadata.js';
import type { CreateEngineOptions } from './engine-api.js';
import type { EngineTransport } from './router.js';
import { guardTransport } from './guarded-transport.js';

export interface EngineParts {
  config: TeConfig;
  control: ControlServer;
  handshake: P2PHandshake;
  held: EngineTransport[];
  /** The control endpoint, which is also the segment name. */
  endpoint: string;
  epoch: bigint;
  log: Log;
  /** Descriptors in etcd (metadata type `etcd`); otherwise they are fetched from peers. */
  etcd?: EtcdMetadata;
}

/** A random 63-bit epoch: a restarted process at the same address is told apart by it. */
function randomEpoch(): bigint {
  return randomBytes(8).readBigUInt64LE() & ((1n << 63n) - 1n);
}

/**
 * Starts everything an engine holds. `onPeerChanged` receives the etcd watch's reports
 * (a peer re-registered or left) from the moment the watch runs.
 */
export async function assembleEngine(
  input: TeConfig | TeConfigInput,
  options: CreateEngineOptions,
  onPeerChanged: (segment: string) => void,
): Promise<EngineParts> {
  const config = validateConfig(input);
  const registry = options.registry ?? defaultRegistry();
  const env = options.env ?? process.env;
  const log = createLogger(config.logLevel, '[te]');
  const plugins = await loadPlugins(config, registry);
  const keys = config.secret === undefined ? undefined : controlKeys(config.secret);
  const control = new ControlServer(keys);
  const endpoint = await control.bind(config.bindAddress, config.metadata.port);
  const handshake = new P2PHandshake(control, keys);
  const epoch = randomEpoch();
  const held: EngineTransport[] = [];
  let etcd: EtcdMetadata | undefined;
  try {
    if (config.metadata.type === 'etcd') {
      const { endpoints, prefix, leaseTtlS } = config.metadata;
      etcd = await EtcdMetadata.connect({ endpoints, prefix, leaseTtlS, self: endpoint, connectMs: config.timeouts.handshakeMs, log, onPeerChanged });
    }
    for (const plugin of plugins) {
      const pluginOptions = optionsOf(plugin, config, env);
      let transport;
      try {
        transport = await plugin.create(
          {
            segmentName: endpoint,
            epoch,
            bindAddress: config.bindAddress,
            connectTimeoutMs: config.timeouts.connectMs,
            env,
            log: (level, message) => log(level, `[${plugin.name}] ${message}`),
            ...(config.secret === undefined ? {} : { secret: config.secret }),
          },
          pluginOptions,
        );
      } catch (cause) {
        const message = (cause as Error)?.message ?? String(cause);
        throw new TransferError(
          isTransferError(cause) ? cause.code : 'INTERNAL',
          `plugin "${plugin.name}" failed to create its transport (create()): ${message.replace(/^\[[^\]]+\] /, '')}`,
          { plugin: plugin.name, cause },
        );
      }
      // Held guarded: the plugin's mistakes come back as TransferErrors naming it, and close() is bounded.
      held.push({
        name: plugin.name,
        plugin,
        transport: guardTransport(plugin.name, transport, { connectTimeoutMs: config.timeouts.connectMs, registerMs: config.timeouts.registerMs }, log),
      });
    }
  } catch (error) {
    await Promise.allSettled(held.map((t) => t.transport.close()));
    await etcd?.close();
    await handshake.close();
    await control.close();
    throw error;
  }
  return { config, control, handshake, held, endpoint, epoch, log, ...(etcd ? { etcd } : {}) };
}
