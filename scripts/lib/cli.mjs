// The command-line parsing every script under bench/ and scripts/ shares: node:util's
// parseArgs plus `--help` (a usage text built from the option descriptions) and a one-line
// error with the usage for a bad option, instead of a stack trace.
import { parseArgs } from 'node:util';

/**
 * @typedef {{ type: 'string' | 'boolean', short?: string, multiple?: boolean, default?: unknown, help: string, hidden?: boolean }} CliOption
 * @param {{ usage: string, summary: string, options?: Record<string, CliOption>, allowPositionals?: boolean, args?: string[], notes?: string }} spec
 *   usage: the synopsis after "usage: " (e.g. "node bench/pd.mjs [options]"); summary: what the
 *   script does; hidden options (internal hooks such as a forked child's --rank) are accepted
 *   but not listed.
 * @returns {{ values: Record<string, any>, positionals: string[] }}
 */
export function parseCli(spec) {
  const options = { help: { type: 'boolean', short: 'h', help: 'print this help and exit' }, ...(spec.options ?? {}) };
  const forParseArgs = Object.fromEntries(Object.entries(options).map(([name, { help: _help, hidden: _hidden, ...rest }]) => [name, rest]));
  let parsed;
  try {
    parsed = parseArgs({ args: spec.args, options: forParseArgs, allowPositionals: spec.allowPositionals ?? false });
  } catch (e) {
    process.stderr.write(`${e.message.split(/\n|\. To specify/)[0]}\n\n${usageText(spec, options)}`);
    process.exit(2);
  }
  if (parsed.values.help) {
    process.stdout.write(usageText(spec, options));
    process.exit(0);
  }
  return parsed;
}

/** The --help text: synopsis, summary, then one line per listed option with its default. */
export function usageText(spec, options) {
  const rows = Object.entries(options)
    .filter(([, o]) => !o.hidden)
    .map(([name, o]) => {
      const flag = `${o.short ? `-${o.short}, ` : ''}--${name}${o.type === 'string' ? ' <value>' : ''}`;
      const shown = o.default === undefined || o.default === false ? '' : ` (default: ${[o.default].flat().join(', ')})`;
      return [flag, `${o.help}${shown}`];
    });
  const width = Math.max(...rows.map(([flag]) => flag.length)) + 2;
  const lines = rows.map(([flag, help]) => `  ${flag.padEnd(width)}${help}`);
  return `usage: ${spec.usage}\n\n${spec.summary}\n\noptions:\n${lines.join('\n')}\n${spec.notes ? `\n${spec.notes}\n` : ''}`;
}
