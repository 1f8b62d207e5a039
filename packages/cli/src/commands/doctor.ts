import pc from 'picocolors';
import {
  BUILTIN_PLUGINS,
  ENVIRONMENT_VARIABLES,
  PluginRegistry,
  describeCapabilities,
  isTransferError,
  preflight,
  transportsOf,
  type PreflightCheck,
  type TeConfig,
  type TransportPlugin,
} from '@te/connector';
import { table } from '../format.js';
import { commandConfig, type CommandFlags } from '../config.js';
import { knownVariables, unreadVariables, type UnreadVariable } from './environment-names.js';

export interface PluginReport {
  name: string;
  source: string;
  loaded: boolean;
  version?: string;
  capabilities?: string;
  available?: boolean;
  reason?: string;
  details?: Record<string, unknown>;
  error?: string;
}

export interface DoctorReport {
  ok: boolean;
  config?: TeConfig;
  configError?: { code: string; message: string };
  /** What an engine with this config would find at start: its plugins and their options, its bind, and etcd when configured. */
  checks: PreflightCheck[];
  environment: Record<string, string>;
  /** TE_/MC_ variables set that te does not read, each with the name it most likely meant (a typo: fails the report). */
  unread: UnreadVariable[];
  plugins: PluginReport[];
}

async function inspect(name: string, source: string, load: () => Promise<TransportPlugin>, loaded: TransportPlugin[]): Promise<PluginReport> {
  let plugin: TransportPlugin;
  try {
    plugin = await load();
  } catch (e) {
    return { name, source, loaded: false, error: (e as Error).message };
  }
  loaded.push(plugin);
  const report: PluginReport = { name, source, loaded: true, version: plugin.version, capabilities: describeCapabilities(plugin.capabilities) };
  try {
    const probe = plugin.probe ? await plugin.probe() : { available: true };
    report.available = probe.available;
    if (probe.reason) report.reason = probe.reason;
    if (probe.details) report.details = probe.details;
  } catch (e) {
    report.available = false;
    report.reason = `probe failed: ${(e as Error).message}`;
  }
  return report;
}

/** Everything `te doctor` checks, as data (the command prints it or its JSON). */
export async function runDoctor(env: NodeJS.ProcessEnv = process.env, flags: CommandFlags = {}): Promise<DoctorReport> {
  const environment = Object.fromEntries(
    Object.keys(ENVIRONMENT_VARIABLES)
      .filter((k) => env[k] !== undefined)
      .map((k) => [k, env[k]!]),
  );
  const report: DoctorReport = { ok: true, checks: [], environment, unread: [], plugins: [] };
  try {
    report.config = await commandConfig(flags, env);
  } catch (e) {
    report.ok = false;
    report.configError = { code: isTransferError(e) ? e.code : 'INVALID_CONFIG', message: (e as Error).message };
  }
  const registry = new PluginRegistry();
  // A config can be valid and still not start here: a plugin option the environment sets
  // wrong, an address of another machine, a port another process holds, an etcd that does
  // not answer.
  if (report.config) report.checks = await preflight(report.config, { registry, env });
  if (report.checks.some((c) => !c.ok)) report.ok = false;
  const loaded: TransportPlugin[] = [];
  for (const [name, pkg] of Object.entries(BUILTIN_PLUGINS)) report.plugins.push(await inspect(name, pkg, () => registry.load(name), loaded));
  const modulePath = report.config?.modulePath;
  if (modulePath)
    report.plugins.push(await inspect(report.config!.connector, modulePath, () => registry.loadModulePath(modulePath, report.config!.connector), loaded));
  const required = report.config ? transportsOf(report.config) : [];
  for (const name of required) {
    if (!report.plugins.some((p) => p.name === name))
      report.plugins.push(await inspect(name, registry.sourceOf(name) ?? '(not registered)', () => registry.load(name), loaded));
  }
  // The plugins' own variables (TE_TCP_WINDOW_BYTES, …) are part of the effective setup too.
  for (const plugin of loaded)
    for (const spec of Object.values(plugin.options ?? {})) if (spec.env && env[spec.env] !== undefined) report.environment[spec.env] = env[spec.env]!;
  report.unread = unreadVariables(env, knownVariables(loaded));
  if (report.unread.length > 0) report.ok = false;
  const wanted = new Set(required);
  for (const p of report.plugins) {
    if (wanted.has(p.name) && (!p.loaded || p.available === false)) report.ok = false;
  }
  return report;
}

export function printDoctor(report: DoctorReport): void {
  console.log(pc.bold('te doctor'));
  console.log('');
  if (report.configError) {
    console.log(`${pc.red('✘ config')}  ${report.configError.code}: ${report.configError.message}`);
  } else if (report.config) {
    const c = report.config;
    console.log(
      `${pc.green('✔ config')}  connector=${c.connector} role=${c.role} transports=[${[c.connector, ...c.transports].join(', ')}] bind=${c.bindAddress} forceTcp=${c.forceTcp} intranodeNvlink=${c.intranodeNvlink} forceMnnvl=${c.forceMnnvl} metrics=${c.metrics} log=${c.logLevel}`,
    );
  }
  for (const c of report.checks) console.log(c.ok ? `${pc.green(`✔ ${c.name}`)}  ${c.detail}` : `${pc.red(`✘ ${c.name}`)}  ${c.code}: ${c.detail}`);
  const env = Object.entries(report.environment);
  for (const u of report.unread) console.log(`${pc.red('✘ environment')}  ${u.name} is set, but te reads no such variable: did you mean ${u.meant}?`);
  console.log(`  environment: ${env.length ? env.map(([k, v]) => `${k}=${v}`).join(' ') : '(no TE_/MC_ variables set)'}`);
  console.log('');
  const rows = [['plugin', 'package', 'status', 'details']];
  // A long reason several plugins share (no CUDA driver, say) is printed once below the table.
  const notes: string[] = [];
  const counts = new Map<string, number>();
  for (const p of report.plugins) if (p.reason) counts.set(p.reason, (counts.get(p.reason) ?? 0) + 1);
  const noteFor = (reason: string): string => {
    if ((counts.get(reason) ?? 0) < 2 || reason.length < 60) return reason;
    let i = notes.indexOf(reason);
    if (i < 0) i = notes.push(reason) - 1;
    return `see note [${i + 1}]`;
  };
  for (const p of report.plugins) {
    const status = !p.loaded ? pc.yellow('not loadable') : p.available === false ? pc.yellow('unavailable') : pc.green(`ok ${p.version}`);
    const details = !p.loaded
      ? firstLine(p.error, p.source)
      : [p.capabilities, p.reason ? noteFor(p.reason) : undefined, p.details ? brief(p.details) : undefined].filter(Boolean).join('; ');
    rows.push([p.name, p.source, status, details]);
  }
  console.log(table(rows));
  notes.forEach((n, i) => console.log(`  [${i + 1}] ${n}`));
  console.log('');
  console.log(report.ok ? pc.green('The configured connector is ready.') : pc.red('Problems found: see above.'));
}

/** Probe facts on one line: scalars in full, lists and objects shortened (`te doctor --json` has everything). */
function brief(details: Record<string, unknown>): string {
  const show = (v: unknown): string => {
    if (Array.isArray(v)) return v.length <= 3 ? `[${v.map(show).join(', ')}]` : `[${v.slice(0, 3).map(show).join(', ')}, +${v.length - 3}]`;
    if (v && typeof v === 'object') return '{…}';
    return String(v);
  };
  return Object.entries(details)
    .map(([k, v]) => `${k}=${show(v)}`)
    .join(' ');
}

/** A one-line reason: "not installed" with the install command, or the loader's own words. */
function firstLine(text?: string, source?: string): string {
  const t = text ?? '';
  if (source && new RegExp(`Cannot find (module|package) '${source.replace(/[/\\^$*+?.()|[\]{}]/g, '\\$&')}'`).test(t))
    return `not installed (npm install ${source})`;
  const tried = t.split('\n').find((l) => l.trim().startsWith('- '));
  return (tried ?? t.split('\n')[0] ?? '').replace(/^\s*- /, '').trim();
}
