import { isIP } from 'node:net';
import { TransferError } from '../errors/transfer-error.js';
import { DEFAULT_CONFIG, type ConnectorRole, type LogLevel, type TeConfig } from './types.js';

const ROLES: readonly ConnectorRole[] = ['producer', 'consumer', 'both'];
const LOG_LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'silent'];
const HOSTNAME = /^(?=.{1,253}$)([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$/;

function fail(message: string): never {
  throw new TransferError('INVALID_CONFIG', message);
}

function show(value: unknown): string {
  return typeof value === 'bigint' ? `${value}n` : (JSON.stringify(value) ?? String(value));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function positiveInt(path: string, value: unknown, { allowZero = false, max = Number.MAX_SAFE_INTEGER } = {}): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < (allowZero ? 0 : 1) || value > max) {
    fail(`Expected \`${path}\` to be ${allowZero ? 'a non-negative' : 'a positive'} integer${max < Number.MAX_SAFE_INTEGER ? ` no larger than ${max}` : ''}, got ${show(value)}`);
  }
  return value;
}

function bool(path: string, value: unknown): boolean {
  if (typeof value !== 'boolean') fail(`Expected \`${path}\` to be a boolean, got ${show(value)}`);
  return value;
}

/** Validates an advertised/bind address: an IP literal or a DNS host name. */
export function validateBindAddress(value: unknown, source = '`bindAddress`'): string {
  if (typeof value !== 'string' || (isIP(value) === 0 && (!HOSTNAME.test(value) || /^[\d.]+$/.test(value)))) {
    fail(`Expected ${source} to be an IPv4/IPv6 address or a host name, got ${show(value)}`);
  }
  if (value === '0.0.0.0' || value === '::') {
    fail(`${source} is ${value}: peers cannot reach a wildcard address; give the address of the interface peers should use`);
  }
  return value;
}

const KNOWN_KEYS = new Set(['connector', 'role', 'modulePath', 'transports', 'transportOptions', 'metadata', 'bindAddress', 'timeouts', 'forceTcp', 'intranodeNvlink', 'forceMnnvl', 'metrics', 'logLevel', 'extra']);

/** Turns a merged input into a complete, checked config; every message names the field. */
export function validateConfig(input: unknown): TeConfig {
  if (!isObject(input)) fail(`Expected the config to be an object, got ${show(input)}`);
  for (const key of Object.keys(input)) {
    if (!KNOWN_KEYS.has(key)) fail(`Unknown config key \`${key}\`; known keys: ${[...KNOWN_KEYS].join(', ')}`);
  }
  const c = input;
  if (typeof c.connector !== 'string' || c.connector.trim() === '') {
    fail(`Expected \`connector\` to name a transport plugin (e.g. "mooncake-tcp"), got ${show(c.connector)}`);
  }
  const role = c.role ?? DEFAULT_CONFIG.role;
  if (!ROLES.includes(role as ConnectorRole)) fail(`Expected \`role\` to be one of ${ROLES.join(', ')}, got ${show(role)}`);
  if (c.modulePath !== undefined && (typeof c.modulePath !== 'string' || c.modulePath === '')) fail(`Expected \`modulePath\` to be a package name or file path, got ${show(c.modulePath)}`);
  const transports = c.transports ?? [];
  if (!Array.isArray(transports) || transports.some((t) => typeof t !== 'string' || t === '')) fail(`Expected \`transports\` to be a list of plugin names, got ${show(transports)}`);
  const transportOptions = c.transportOptions ?? {};
  if (!isObject(transportOptions) || Object.values(transportOptions).some((v) => !isObject(v))) fail(`Expected \`transportOptions\` to map plugin names to option objects, got ${show(transportOptions)}`);
  const metadata = { ...DEFAULT_CONFIG.metadata, ...(isObject(c.metadata) ? c.metadata : {}) };
  if (c.metadata !== undefined && !isObject(c.metadata)) fail(`Expected \`metadata\` to be an object, got ${show(c.metadata)}`);
  if (metadata.type !== 'p2p') fail(`Expected \`metadata.type\` to be "p2p", got ${show(metadata.type)}`);
  positiveInt('metadata.port', metadata.port, { allowZero: true, max: 65535 });
  if (c.timeouts !== undefined && !isObject(c.timeouts)) fail(`Expected \`timeouts\` to be an object, got ${show(c.timeouts)}`);
  const timeouts = { ...DEFAULT_CONFIG.timeouts, ...(isObject(c.timeouts) ? c.timeouts : {}) };
  for (const [k, v] of Object.entries(timeouts)) positiveInt(`timeouts.${k}`, v, { max: 2_147_483_647 });
  const logLevel = c.logLevel ?? DEFAULT_CONFIG.logLevel;
  if (!LOG_LEVELS.includes(logLevel as LogLevel)) fail(`Expected \`logLevel\` to be one of ${LOG_LEVELS.join(', ')}, got ${show(logLevel)}`);
  const extra = c.extra ?? {};
  if (!isObject(extra)) fail(`Expected \`extra\` to be an object, got ${show(extra)}`);
  const config: TeConfig = {
    connector: c.connector.trim(),
    role: role as ConnectorRole,
    transports: [...(transports as string[])],
    transportOptions: transportOptions as TeConfig['transportOptions'],
    metadata: metadata as TeConfig['metadata'],
    bindAddress: validateBindAddress(c.bindAddress ?? DEFAULT_CONFIG.bindAddress),
    timeouts: timeouts as TeConfig['timeouts'],
    forceTcp: bool('forceTcp', c.forceTcp ?? false),
    intranodeNvlink: bool('intranodeNvlink', c.intranodeNvlink ?? false),
    forceMnnvl: bool('forceMnnvl', c.forceMnnvl ?? false),
    metrics: bool('metrics', c.metrics ?? false),
    logLevel: logLevel as LogLevel,
    extra,
  };
  if (c.modulePath !== undefined) config.modulePath = c.modulePath as string;
  if (config.forceMnnvl && config.intranodeNvlink) {
    throw new TransferError('CONFLICTING_ENV', 'MC_FORCE_MNNVL and MC_INTRANODE_NVLINK are both set: multi-node NVLink and intra-node NVLink are mutually exclusive; unset one of them (forceMnnvl / intranodeNvlink)');
  }
  return config;
}
