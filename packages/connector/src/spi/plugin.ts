import { TransferError } from '../errors/transfer-error.js';
import type { TransportCapabilities } from './capabilities.js';
import type { OptionsOf, OptionsSchema } from './options.js';
import { checkOptionSpec } from './option-spec-schema.js';
import type { Transport, TransportContext } from './transport.js';
import { TRANSPORT_CLASSES, TRANSPORT_CLASS_PATTERN } from './descriptor.js';

/** The plugin API this package implements. A plugin built for another version is refused. */
export const PLUGIN_API_VERSION = 1;

/** What a plugin's hardware probe found, for `te doctor` and clear "unavailable" errors. */
export interface ProbeResult {
  available: boolean;
  /** Why it is unavailable and what to do about it (install a package, set a variable). */
  reason?: string;
  /** Facts found (devices, providers, versions). */
  details?: Record<string, unknown>;
}

export interface TransportPlugin<S extends OptionsSchema = OptionsSchema> {
  apiVersion: number;
  /** The name users put in config (`"connector": "mooncake-tcp"`). */
  name: string;
  version: string;
  capabilities: TransportCapabilities;
  options: S;
  /** Detects hardware and libraries without creating anything. */
  probe?(): Promise<ProbeResult> | ProbeResult;
  create(context: TransportContext, options: OptionsOf<S>): Promise<Transport>;
}

/** Declares a transport plugin; the default export of a plugin package. */
export function definePlugin<S extends OptionsSchema>(plugin: TransportPlugin<S>): TransportPlugin<S> {
  return plugin;
}

/** What a plugin's `name` (and so a connector name) must look like: a lower-case identifier. */
export const PLUGIN_NAME_PATTERN = /^[a-z0-9][a-z0-9._-]*$/;

/**
 * Checks a loaded module's plugin object before anything uses it. `source` names the
 * package or file, so the message says which install is at fault.
 */
export function validatePlugin(candidate: unknown, source: string): TransportPlugin {
  if (typeof candidate !== 'object' || candidate === null) {
    throw new TransferError('PLUGIN_INVALID', `${source} does not export a plugin object (export default definePlugin({...}))`);
  }
  const p = candidate as Partial<TransportPlugin>;
  if (p.apiVersion !== PLUGIN_API_VERSION) {
    throw new TransferError(
      'PLUGIN_API_MISMATCH',
      `${source}${p.name ? ` (plugin "${p.name}")` : ''} implements plugin API version ${String(p.apiVersion)}, but @te/connector expected ${PLUGIN_API_VERSION}, got ${String(p.apiVersion)}; install a version of the plugin built for plugin API ${PLUGIN_API_VERSION}`,
      { details: { expected: PLUGIN_API_VERSION, got: p.apiVersion, source } },
    );
  }
  const problems: string[] = [];
  if (typeof p.name !== 'string' || !PLUGIN_NAME_PATTERN.test(p.name)) problems.push('`name` must be a lower-case identifier');
  if (typeof p.version !== 'string') problems.push('`version` must be a string');
  if (typeof p.create !== 'function') problems.push('`create` must be a function');
  if (typeof p.options !== 'object' || p.options === null) problems.push('`options` must be an options schema object');
  else {
    for (const [name, spec] of Object.entries(p.options as Record<string, unknown>)) {
      if (!checkOptionSpec.Check(spec)) {
        const t = (spec as { type?: unknown } | null)?.type;
        problems.push(
          `option \`${name}\` is not a valid option spec (type ${JSON.stringify(t)}; expected string, integer, number, boolean, enum or list with a description, a default of that type, and an UPPER_CASE env name)`,
        );
        continue;
      }
      const s = spec as { type: string; default?: unknown; values?: string[]; min?: number; max?: number; pattern?: unknown };
      if (s.pattern !== undefined && !(s.pattern instanceof RegExp)) problems.push(`option \`${name}\`: pattern must be a RegExp`);
      if (s.type === 'enum' && s.default !== undefined && !s.values!.includes(s.default as string))
        problems.push(`option \`${name}\`: default ${JSON.stringify(s.default)} is not one of its values`);
      if (typeof s.default === 'number' && ((s.min !== undefined && s.default < s.min) || (s.max !== undefined && s.default > s.max)))
        problems.push(`option \`${name}\`: default ${s.default} is outside [${s.min ?? '-∞'}, ${s.max ?? '∞'}]`);
    }
  }
  const c = p.capabilities;
  if (typeof c !== 'object' || c === null) {
    problems.push('`capabilities` must be declared');
  } else {
    const known = (TRANSPORT_CLASSES as readonly unknown[]).includes(c.class);
    if (!known && (typeof c.class !== 'string' || !TRANSPORT_CLASS_PATTERN.test(c.class) || c.locality === undefined)) {
      problems.push(
        `\`capabilities.class\` must be one of ${TRANSPORT_CLASSES.join(', ')}, or a class of the plugin's own (lower-case words joined by '-') declared with \`capabilities.locality\``,
      );
    }
    if (c.locality !== undefined && (typeof c.locality !== 'number' || !Number.isFinite(c.locality) || c.locality < 0))
      problems.push('`capabilities.locality` must be a non-negative number');
    if (!Array.isArray(c.memoryKinds) || c.memoryKinds.length === 0 || c.memoryKinds.some((k) => k !== 'cpu' && k !== 'cuda'))
      problems.push('`capabilities.memoryKinds` must list cpu and/or cuda');
    for (const flag of ['read', 'notifications', 'rawAddresses'] as const) {
      if (typeof c[flag] !== 'boolean') problems.push(`\`capabilities.${flag}\` must be a boolean`);
    }
    for (const flag of ['gatherWrites', 'scatterWrites', 'verifiedWrites', 'ownMemoryOnly'] as const)
      if (c[flag] !== undefined && typeof c[flag] !== 'boolean') problems.push(`\`capabilities.${flag}\` must be a boolean when given`);
    if (!Number.isInteger(c.maxInFlight) || c.maxInFlight < 1) problems.push('`capabilities.maxInFlight` must be a positive integer');
  }
  if (problems.length > 0) {
    throw new TransferError('PLUGIN_INVALID', `${source} exports an invalid plugin: ${problems.join('; ')}`, p.name ? { plugin: p.name } : {});
  }
  return p as TransportPlugin;
}
