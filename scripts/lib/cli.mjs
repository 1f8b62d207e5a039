// The command-line parsing every script under bench/ and scripts/ shares: node:util's
// parseArgs plus `--help` (a usage text built from the option descriptions) and a one-line
// error with the usage for a bad option, instead of a stack trace.
import { parseArgs } from 'node:util';

/**
 * @typedef {{ integer?: boolean, min?: number, above?: number, max?: number }} NumberRange
 *   a numeric option's values: an integer or any finite number, at least `min` or more than
 *   `above`, at most `max`
 * @typedef {{ type: 'string' | 'boolean', short?: string, multiple?: boolean, default?: unknown, help: string, hidden?: boolean, number?: NumberRange }} CliOption
 * @param {{ usage: string, summary: string, options?: Record<string, CliOption>, allowPositionals?: boolean, args?: string[], notes?: string }} spec
 *   usage: the synopsis after "usage: " (e.g. "node bench/pd.mjs [options]"); summary: what the
 *   script does; hidden options (internal hooks such as a forked child's --rank) are accepted
 *   but not listed.
 * @returns {{ values: Record<string, any>, positionals: string[] }}
 */
export function parseCli(spec) {
  const options = { help: { type: 'boolean', short: 'h', help: 'print this help and exit' }, ...(spec.options ?? {}) };
  const forParseArgs = Object.fromEntries(Object.entries(options).map(([name, { help: _help, hidden: _hidden, number: _number, ...rest }]) => [name, rest]));
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
  for (const [name, o] of Object.entries(options)) {
    if (!o.number || parsed.values[name] === undefined) continue;
    for (const value of [parsed.values[name]].flat()) {
      const problem = rangeProblem(name, String(value), o.number);
      if (problem) {
        process.stderr.write(`${problem}\n\n${usageText(spec, options)}`);
        process.exit(2);
      }
    }
  }
  return parsed;
}

/** Why `text` is not a value of the numeric option `--name`, or undefined when it is. */
export function rangeProblem(name, text, range) {
  const n = Number(text);
  const fits =
    text.trim() !== '' &&
    Number.isFinite(n) &&
    (!range.integer || Number.isInteger(n)) &&
    (range.min === undefined || n >= range.min) &&
    (range.above === undefined || n > range.above) &&
    (range.max === undefined || n <= range.max);
  if (fits) return undefined;
  const bounds = [
    range.min !== undefined && range.max !== undefined ? `from ${range.min} to ${range.max}` : undefined,
    range.min !== undefined && range.max === undefined ? `of at least ${range.min}` : undefined,
    range.above !== undefined ? `above ${range.above}` : undefined,
    range.above !== undefined && range.max !== undefined ? `and at most ${range.max}` : undefined,
    range.min === undefined && range.above === undefined && range.max !== undefined ? `of at most ${range.max}` : undefined,
  ].filter(Boolean);
  return `Expected --${name} to be ${range.integer ? 'an integer' : 'a number'}${bounds.length ? ` ${bounds.join(' ')}` : ''}, got ${JSON.stringify(text)}`;
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
