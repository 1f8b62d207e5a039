import { TransferError } from '../errors/transfer-error.js';
import { parseEnvBoolean } from '../spi/options.js';
import type { LogLevel, TeConfigInput } from './types.js';
import { validateBindAddress } from './validate.js';
import { normaliseRole } from './roles.js';
import { parseMetadataString } from '../metadata/connection-string.js';
import { SWITCH_PROVIDERS } from '../registry/builtins.js';

/**
 * The environment variables te reads. Mooncake's names are honoured as users already set
 * them; TE_* names cover the rest.
 */
export const ENVIRONMENT_VARIABLES = {
  TE_CONFIG: 'Path of a JSON config file (merged under the environment)',
  TE_CONNECTOR: 'connector: transport plugin name',
  TE_ROLE: 'role: producer | consumer | both (vLLM spellings kv_producer, ec_consumer, ... accepted)',
  TE_MODULE_PATH: 'modulePath: package or file of a third-party plugin',
  TE_TRANSPORTS: 'transports: extra plugin names, comma separated',
  TE_HANDSHAKE_PORT: 'metadata.port: control endpoint port (0 = any free port)',
  TE_METADATA: 'metadata: "p2p" or "etcd://host:2379[,host:2379]"',
  MC_METADATA_SERVER: "metadata: Mooncake's spelling of TE_METADATA (TE_METADATA wins)",
  TE_METADATA_PREFIX: 'metadata.prefix: etcd key prefix (cluster id)',
  TE_TRANSFER_TIMEOUT_MS: 'timeouts.transferMs: default batch deadline',
  TE_HANDSHAKE_TIMEOUT_MS: 'timeouts.handshakeMs: descriptor fetch deadline',
  TE_CONNECT_TIMEOUT_MS: 'timeouts.connectMs: transport connect deadline',
  TE_REGISTER_TIMEOUT_MS: "timeouts.registerMs: deadline of a transport's memory registration",
  MC_FORCE_TCP: 'forceTcp: route every request over TCP',
  MC_INTRANODE_NVLINK: `intranodeNvlink: add ${SWITCH_PROVIDERS.intranodeNvlink} (exclusive with MC_FORCE_MNNVL)`,
  MC_FORCE_MNNVL: `forceMnnvl: add ${SWITCH_PROVIDERS.forceMnnvl} (exclusive with MC_INTRANODE_NVLINK)`,
  MC_TE_METRIC: 'metrics: collect transfer metrics and log a throughput line periodically',
  TE_METRIC_INTERVAL_S: 'seconds between MC_TE_METRIC lines (default 5)',
  MC_LOG_LEVEL: 'logLevel: trace | debug | info | warn | error | silent',
  MC_TCP_BIND_ADDRESS: 'bindAddress: address to bind and advertise',
  TE_SECRET: 'secret: shared secret that authenticates the control plane and the transports (16+ characters)',
} as const;

const LOG_ALIASES: Record<string, LogLevel> = {
  trace: 'trace',
  debug: 'debug',
  info: 'info',
  warn: 'warn',
  warning: 'warn',
  error: 'error',
  silent: 'silent',
  off: 'silent',
};

function integer(name: string, raw: string): number {
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isInteger(n)) {
    throw new TransferError('INVALID_CONFIG', `Expected environment variable ${name} to be an integer, got ${JSON.stringify(raw)}`);
  }
  return n;
}

/** Reads the config fields the environment sets; absent variables leave fields unset. */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): TeConfigInput {
  const out: TeConfigInput = {};
  const get = (name: keyof typeof ENVIRONMENT_VARIABLES): string | undefined => env[name];
  if (get('TE_CONNECTOR') !== undefined) out.connector = get('TE_CONNECTOR')!;
  if (get('TE_ROLE') !== undefined) out.role = normaliseRole(get('TE_ROLE')) as TeConfigInput['role'];
  if (get('TE_MODULE_PATH') !== undefined) out.modulePath = get('TE_MODULE_PATH')!;
  if (get('TE_TRANSPORTS') !== undefined)
    out.transports = get('TE_TRANSPORTS')!
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  const metadata: Record<string, unknown> = {};
  const server = get('TE_METADATA') ?? get('MC_METADATA_SERVER');
  if (server !== undefined)
    Object.assign(
      metadata,
      parseMetadataString(server, get('TE_METADATA') !== undefined ? 'environment variable TE_METADATA' : 'environment variable MC_METADATA_SERVER'),
    );
  if (get('TE_HANDSHAKE_PORT') !== undefined) metadata.port = integer('TE_HANDSHAKE_PORT', get('TE_HANDSHAKE_PORT')!);
  if (get('TE_METADATA_PREFIX') !== undefined) metadata.prefix = get('TE_METADATA_PREFIX')!;
  if (Object.keys(metadata).length > 0) out.metadata = metadata as TeConfigInput['metadata'];
  const timeouts: NonNullable<TeConfigInput['timeouts']> = {};
  if (get('TE_TRANSFER_TIMEOUT_MS') !== undefined) timeouts.transferMs = integer('TE_TRANSFER_TIMEOUT_MS', get('TE_TRANSFER_TIMEOUT_MS')!);
  if (get('TE_HANDSHAKE_TIMEOUT_MS') !== undefined) timeouts.handshakeMs = integer('TE_HANDSHAKE_TIMEOUT_MS', get('TE_HANDSHAKE_TIMEOUT_MS')!);
  if (get('TE_CONNECT_TIMEOUT_MS') !== undefined) timeouts.connectMs = integer('TE_CONNECT_TIMEOUT_MS', get('TE_CONNECT_TIMEOUT_MS')!);
  if (get('TE_REGISTER_TIMEOUT_MS') !== undefined) timeouts.registerMs = integer('TE_REGISTER_TIMEOUT_MS', get('TE_REGISTER_TIMEOUT_MS')!);
  if (Object.keys(timeouts).length > 0) out.timeouts = timeouts;
  if (get('TE_METRIC_INTERVAL_S') !== undefined) out.metricIntervalS = integer('TE_METRIC_INTERVAL_S', get('TE_METRIC_INTERVAL_S')!);
  for (const [name, key] of [
    ['MC_FORCE_TCP', 'forceTcp'],
    ['MC_INTRANODE_NVLINK', 'intranodeNvlink'],
    ['MC_FORCE_MNNVL', 'forceMnnvl'],
    ['MC_TE_METRIC', 'metrics'],
  ] as const) {
    const raw = env[name];
    if (raw !== undefined) out[key] = parseEnvBoolean(name, raw);
  }
  const level = get('MC_LOG_LEVEL');
  if (level !== undefined) {
    const mapped = LOG_ALIASES[level.trim().toLowerCase()];
    if (!mapped)
      throw new TransferError(
        'INVALID_CONFIG',
        `Expected environment variable MC_LOG_LEVEL to be one of trace, debug, info, warn, error, silent, got ${JSON.stringify(level)}`,
      );
    out.logLevel = mapped;
  }
  if (get('TE_SECRET') !== undefined) out.secret = get('TE_SECRET')!;
  if (get('MC_TCP_BIND_ADDRESS') !== undefined)
    out.bindAddress = validateBindAddress(get('MC_TCP_BIND_ADDRESS')!.trim(), 'environment variable MC_TCP_BIND_ADDRESS');
  if (out.forceMnnvl && out.intranodeNvlink) {
    throw new TransferError(
      'CONFLICTING_ENV',
      'MC_FORCE_MNNVL and MC_INTRANODE_NVLINK are both set: multi-node NVLink and intra-node NVLink are mutually exclusive; unset one of them',
    );
  }
  return out;
}
