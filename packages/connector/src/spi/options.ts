import { TransferError } from '../errors/transfer-error.js';

/**
 * Options are declared in code, with defaults, descriptions and the environment
 * variable that sets each one, so `te doctor` and the docs list them from one place.
 * Precedence: an explicit value in config > the environment variable > the default.
 */
export type OptionSpec =
  | { type: 'string'; default?: string; env?: string; description: string; pattern?: RegExp }
  | { type: 'integer'; default?: number; env?: string; description: string; min?: number; max?: number }
  | { type: 'number'; default?: number; env?: string; description: string; min?: number; max?: number }
  | { type: 'boolean'; default?: boolean; env?: string; description: string }
  | { type: 'enum'; values: readonly string[]; default?: string; env?: string; description: string }
  | { type: 'list'; default?: readonly string[]; env?: string; description: string };

export type OptionsSchema = Record<string, OptionSpec>;

type ValueOf<S extends OptionSpec> = S extends { type: 'string' }
  ? string
  : S extends { type: 'integer' | 'number' }
    ? number
    : S extends { type: 'boolean' }
      ? boolean
      : S extends { type: 'enum'; values: readonly (infer V)[] }
        ? V
        : S extends { type: 'list' }
          ? string[]
          : never;

/** The parsed options object of a schema: declared defaults make a key required. */
export type OptionsOf<S extends OptionsSchema> = {
  [K in keyof S as S[K] extends { default: unknown } ? K : never]: ValueOf<S[K]>;
} & {
  [K in keyof S as S[K] extends { default: unknown } ? never : K]?: ValueOf<S[K]>;
};

const TRUE_WORDS = new Set(['1', 'true', 'yes', 'on']);
const FALSE_WORDS = new Set(['0', 'false', 'no', 'off', '']);

/** Parses an environment string as a boolean; anything else is a typed error. */
export function parseEnvBoolean(name: string, raw: string): boolean {
  const v = raw.trim().toLowerCase();
  if (TRUE_WORDS.has(v)) return true;
  if (FALSE_WORDS.has(v)) return false;
  throw new TransferError(
    'INVALID_CONFIG',
    `Expected environment variable ${name} to be a boolean (1/0, true/false, yes/no, on/off), got ${JSON.stringify(raw)}`,
  );
}

function describe(value: unknown): string {
  return typeof value === 'bigint' ? `${value}n` : (JSON.stringify(value) ?? String(value));
}

function fail(plugin: string | undefined, message: string): never {
  throw new TransferError('INVALID_CONFIG', message, plugin ? { plugin } : {});
}

function coerceFromEnv(spec: OptionSpec, envName: string, raw: string, plugin?: string): unknown {
  switch (spec.type) {
    case 'boolean':
      try {
        return parseEnvBoolean(envName, raw);
      } catch (e) {
        return fail(plugin, (e as Error).message);
      }
    case 'integer':
    case 'number': {
      const n = Number(raw.trim());
      if (raw.trim() === '' || Number.isNaN(n)) fail(plugin, `Expected environment variable ${envName} to be a number, got ${JSON.stringify(raw)}`);
      return n;
    }
    case 'list':
      return raw
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
    default:
      return raw;
  }
}

function checkValue(name: string, spec: OptionSpec, value: unknown, plugin?: string): unknown {
  const where = `option \`${name}\``;
  switch (spec.type) {
    case 'string':
      if (typeof value !== 'string') fail(plugin, `Expected ${where} to be a string, got ${describe(value)}`);
      if (spec.pattern && !spec.pattern.test(value)) fail(plugin, `Expected ${where} to match ${spec.pattern}, got ${describe(value)}`);
      return value;
    case 'integer':
    case 'number': {
      const integer = spec.type === 'integer';
      const ok = typeof value === 'number' && Number.isFinite(value) && (!integer || Number.isInteger(value));
      const lo = spec.min ?? -Infinity;
      const hi = spec.max ?? Infinity;
      if (!ok || (value as number) < lo || (value as number) > hi) {
        const range = spec.min !== undefined || spec.max !== undefined ? ` between ${spec.min ?? '-∞'} and ${spec.max ?? '∞'}` : '';
        fail(plugin, `Expected ${where} to be ${integer ? 'an integer' : 'a number'}${range}, got ${describe(value)}`);
      }
      return value;
    }
    case 'boolean':
      if (typeof value !== 'boolean') fail(plugin, `Expected ${where} to be a boolean, got ${describe(value)}`);
      return value;
    case 'enum':
      if (typeof value !== 'string' || !spec.values.includes(value))
        fail(plugin, `Expected ${where} to be one of ${spec.values.map((v) => JSON.stringify(v)).join(', ')}, got ${describe(value)}`);
      return value;
    case 'list':
      if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) fail(plugin, `Expected ${where} to be a list of strings, got ${describe(value)}`);
      return [...(value as string[])];
  }
}

/**
 * Validates `input` against `schema`, filling from the environment and defaults.
 * Unknown keys are refused (a typo must not silently fall back to a default).
 */
export function parseOptions<S extends OptionsSchema>(
  schema: S,
  input: Record<string, unknown> = {},
  env: NodeJS.ProcessEnv = process.env,
  plugin?: string,
): OptionsOf<S> {
  for (const key of Object.keys(input)) {
    if (!(key in schema)) {
      fail(
        plugin,
        `Unknown option \`${key}\`; known options: ${
          Object.keys(schema)
            .map((k) => `\`${k}\``)
            .join(', ') || '(none)'
        }`,
      );
    }
  }
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(schema)) {
    let value: unknown = input[name];
    if (value === undefined && spec.env && env[spec.env] !== undefined) {
      value = coerceFromEnv(spec, spec.env, env[spec.env]!, plugin);
      try {
        value = checkValue(name, spec, value, plugin);
      } catch (e) {
        fail(plugin, `${(e as Error).message.replace(/^\[[^\]]+\] /, '')} (from environment variable ${spec.env})`);
      }
      out[name] = value;
      continue;
    }
    if (value === undefined) value = spec.default;
    if (value !== undefined) out[name] = checkValue(name, spec, value, plugin);
  }
  return out as OptionsOf<S>;
}
