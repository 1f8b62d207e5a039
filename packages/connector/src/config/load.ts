import { readFileSync } from 'node:fs';
import { TransferError } from '../errors/transfer-error.js';
import { configFromEnv } from './env.js';
import { SWITCH_PROVIDERS } from '../registry/builtins.js';
import type { TeConfig, TeConfigInput } from './types.js';
import { validateConfig } from './validate.js';
import { normaliseRole } from './roles.js';
import { parseMetadataString } from '../metadata/connection-string.js';

const VLLM_ONLY_KEYS = /^(engine_id|(kv|ec)_[a-z_]+)$/;

/**
 * Accepts vLLM's KVTransferConfig / ECTransferConfig spelling (`kv_connector`,
 * `kv_role: "kv_producer"`, `kv_connector_module_path`, `kv_connector_extra_config`,
 * and the `ec_` equivalents) besides te's own keys, so a framework can pass its config
 * through. Its other fields (`engine_id`, `kv_rank`, `kv_port`, `kv_buffer_device`, ...)
 * are kept in `extra` under their own names for the connector runtime.
 */
export function fromFrameworkConfig(input: Record<string, unknown>): Record<string, unknown> {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    throw new TransferError(
      'INVALID_CONFIG',
      `Expected a framework's transfer config to be an object, got ${input === null ? 'null' : Array.isArray(input) ? 'an array' : typeof input}`,
    );
  const out: Record<string, unknown> = {};
  const passThrough: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(input)) {
    if (key === 'metadata_server') {
      // Mooncake's config spelling: "P2PHANDSHAKE" or "etcd://host:port".
      out.metadata = value;
      continue;
    }
    const m = /^(kv|ec)_(connector|role|connector_module_path|connector_extra_config)$/.exec(key);
    if (!m) {
      if (VLLM_ONLY_KEYS.test(key)) passThrough[key] = value;
      else out[key] = value;
      continue;
    }
    switch (m[2]) {
      case 'connector':
        out.connector = value;
        break;
      case 'role':
        out.role = normaliseRole(value);
        break;
      case 'connector_module_path':
        out.modulePath = value;
        break;
      case 'connector_extra_config':
        out.extra = { ...(out.extra as object), ...(value as object) };
        break;
    }
  }
  if (Object.keys(passThrough).length > 0) out.extra = { ...passThrough, ...(out.extra as object) };
  return out;
}

function mergeInputs(...inputs: TeConfigInput[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const input of inputs) {
    for (const [key, value] of Object.entries(input)) {
      if (value === undefined) continue;
      const prev = out[key];
      // A metadata connection string is expanded first so a later layer (TE_HANDSHAKE_PORT)
      // can refine it; a later string replaces what came before.
      const v = key === 'metadata' && typeof value === 'string' ? { ...parseMetadataString(value) } : value;
      const nested =
        (key === 'metadata' || key === 'timeouts' || key === 'transportOptions' || key === 'extra') &&
        typeof prev === 'object' &&
        prev !== null &&
        typeof v === 'object';
      out[key] = nested ? { ...(prev as object), ...(v as object) } : v;
    }
  }
  return out;
}

export function parseConfigJson(text: string, source = 'config JSON'): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (cause) {
    throw new TransferError('INVALID_CONFIG', `${source} is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new TransferError('INVALID_CONFIG', `${source} must hold a JSON object`);
  }
  return fromFrameworkConfig(parsed as Record<string, unknown>);
}

export function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new TransferError('INVALID_CONFIG', `Cannot read config file ${path}: ${(cause as Error).message}`, { cause });
  }
  return parseConfigJson(text, `Config file ${path}`);
}

export interface LoadConfigOptions {
  /** A JSON file; defaults to $TE_CONFIG when set. */
  file?: string;
  /** A JSON string or an object (te or vLLM spelling). */
  json?: string | Record<string, unknown>;
  /** Defaults to process.env; pass {} to ignore the environment. */
  env?: NodeJS.ProcessEnv;
  /** Values set in code; they win over everything. */
  overrides?: TeConfigInput;
}

/**
 * Builds the config. Precedence, lowest first: defaults, the JSON file, inline JSON,
 * environment variables, overrides in code.
 */
export function loadConfig(options: LoadConfigOptions = {}): TeConfig {
  if (typeof options !== 'object' || options === null)
    throw new TransferError(
      'INVALID_ARGUMENT',
      `Expected loadConfig's options to be an object ({ file?, json?, env? }), got ${options === null ? 'null' : typeof options}`,
    );
  const env = options.env ?? process.env;
  const file = options.file ?? env.TE_CONFIG;
  const fromFile = file ? readConfigFile(file) : {};
  const fromJson = options.json === undefined ? {} : typeof options.json === 'string' ? parseConfigJson(options.json) : fromFrameworkConfig(options.json);
  const merged = mergeInputs(
    fromFile as TeConfigInput,
    fromJson as TeConfigInput,
    configFromEnv(env),
    fromFrameworkConfig((options.overrides ?? {}) as Record<string, unknown>) as TeConfigInput,
  );
  return validateConfig(merged);
}

/** The plugin names an engine built from this config holds, primary first, without repeats. */
export function transportsOf(config: TeConfig): string[] {
  const names = [config.connector, ...config.transports];
  if (config.intranodeNvlink) names.push(SWITCH_PROVIDERS.intranodeNvlink);
  if (config.forceMnnvl) names.push(SWITCH_PROVIDERS.forceMnnvl);
  return [...new Set(names)];
}
