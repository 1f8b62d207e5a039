import { isIP } from 'node:net';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { ValueErrorType } from '@sinclair/typebox/errors';
import type { TSchema } from '@sinclair/typebox';
import { TransferError } from '../errors/transfer-error.js';
import { closestName } from './closest-name.js';
import { ConfigInputSchema, MetadataObjectSchema } from './schema.js';
import { checkEndpoint, parseMetadataString } from '../metadata/connection-string.js';
import { DEFAULT_CONFIG, type ConnectorRole, type LogLevel, type TeConfig } from './types.js';

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

const checkInput = TypeCompiler.Compile(ConfigInputSchema);
const checkMetadataObject = TypeCompiler.Compile(MetadataObjectSchema);
const KNOWN_KEYS = Object.keys(ConfigInputSchema.properties);

/** The first schema error, in the words of the field it is about. */
function schemaFailure(input: unknown): never {
  const errors = [...checkInput.Errors(input)];
  // A misspelt key is also a missing one (`conector`: no `connector`); the misspelling is the
  // cause, so it is named first.
  let e = errors.find((x) => x.type === ValueErrorType.ObjectAdditionalProperties) ?? errors[0]!;
  // `metadata` is a string or an object: for an object, report the field that is wrong.
  const metadata = (input as Record<string, unknown>).metadata;
  if (e.path === '/metadata' && isObject(metadata)) {
    const inner = checkMetadataObject.Errors(metadata).First();
    if (inner) e = { ...inner, path: `/metadata${inner.path}` };
  }
  const path = e.path.replace(/^\//, '').replace(/\//g, '.');
  if (e.type === ValueErrorType.ObjectAdditionalProperties) {
    const top = path.split('.')[0];
    const meant = closestName(top!, KNOWN_KEYS);
    if (!path.includes('.')) fail(`Unknown config key \`${top}\`${meant ? ` (did you mean \`${meant}\`?)` : ''}; known keys: ${KNOWN_KEYS.join(', ')}`);
    fail(`Unknown key \`${path}\` in the config`);
  }
  // The property's own schema carries the phrase; a nested error (an item of a list) uses its parent's.
  let expected: string | undefined;
  let at = path;
  for (let p = path; p !== '' && expected === undefined; p = p.includes('.') ? p.slice(0, p.lastIndexOf('.')) : '') {
    let node: TSchema | undefined = ConfigInputSchema;
    for (const part of p.split('.')) {
      // Through a union, the branch that has fields (metadata: string | object).
      const withFields: TSchema | undefined = (node as { anyOf?: TSchema[] })?.anyOf?.find((b) => (b as { properties?: unknown }).properties) ?? node;
      node = (withFields as { properties?: Record<string, TSchema> })?.properties?.[part];
    }
    expected = (node as { expected?: string } | undefined)?.expected;
    at = p;
  }
  const value = at.split('.').reduce<unknown>((v, k) => (isObject(v) ? v[k] : undefined), input);
  fail(expected ? `Expected \`${at}\` to ${expected}, got ${show(value)}` : `Invalid config at \`${path || '(root)'}\`: ${e.message}`);
}

/** The metadata settings from a connection string or an object, defaults filled in. */
function metadataOf(input: unknown): TeConfig['metadata'] {
  const given = typeof input === 'string' ? parseMetadataString(input) : isObject(input) ? input : {};
  const m = { ...DEFAULT_CONFIG.metadata, ...given } as TeConfig['metadata'];
  m.endpoints = [...m.endpoints];
  for (const e of m.endpoints) checkEndpoint(e);
  if (m.type === 'etcd' && m.endpoints.length === 0)
    fail('`metadata.type` is "etcd" but no `metadata.endpoints` are given (e.g. metadata: "etcd://10.0.0.5:2379")');
  return m;
}

/** Turns a merged input into a complete, checked config; every message names the field. */
export function validateConfig(input: unknown): TeConfig {
  if (!isObject(input)) fail(`Expected the config to be an object, got ${show(input)}`);
  // undefined fields (a spread of optional values) count as absent.
  const c = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  if (!checkInput.Check(c)) schemaFailure(c);
  c.connector = (c.connector as string).trim();
  const role = c.role ?? DEFAULT_CONFIG.role;
  const transports = c.transports ?? [];
  const transportOptions = c.transportOptions ?? {};
  const metadata = metadataOf(c.metadata);
  const timeouts = { ...DEFAULT_CONFIG.timeouts, ...(isObject(c.timeouts) ? c.timeouts : {}) };
  const logLevel = c.logLevel ?? DEFAULT_CONFIG.logLevel;
  const extra = c.extra ?? {};
  const config: TeConfig = {
    connector: c.connector as string,
    role: role as ConnectorRole,
    transports: [...(transports as string[])],
    transportOptions: transportOptions as TeConfig['transportOptions'],
    metadata: metadata as TeConfig['metadata'],
    bindAddress: validateBindAddress(c.bindAddress ?? DEFAULT_CONFIG.bindAddress),
    timeouts: timeouts as TeConfig['timeouts'],
    forceTcp: (c.forceTcp as boolean | undefined) ?? false,
    intranodeNvlink: (c.intranodeNvlink as boolean | undefined) ?? false,
    forceMnnvl: (c.forceMnnvl as boolean | undefined) ?? false,
    metrics: (c.metrics as boolean | undefined) ?? false,
    metricIntervalS: (c.metricIntervalS as number | undefined) ?? DEFAULT_CONFIG.metricIntervalS,
    logLevel: logLevel as LogLevel,
    extra: extra as Record<string, unknown>,
  };
  if (c.modulePath !== undefined) config.modulePath = c.modulePath as string;
  if (c.secret !== undefined) config.secret = c.secret as string;
  if (config.forceMnnvl && config.intranodeNvlink) {
    throw new TransferError(
      'CONFLICTING_ENV',
      'MC_FORCE_MNNVL and MC_INTRANODE_NVLINK are both set: multi-node NVLink and intra-node NVLink are mutually exclusive; unset one of them (forceMnnvl / intranodeNvlink)',
    );
  }
  return config;
}
