/** A usage error: printed without a stack, exit code 2 (see te.ts). */
export class UsageError extends Error {}

/** An integer option's value from `min` to `max`, or a UsageError naming the option (`name`, with its dashes). */
export function integerOption(name: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min || n > max)
    throw new UsageError(`Expected ${name} to be an integer from ${min} to ${max}, got ${JSON.stringify(text)}`);
  return n;
}

/** A count option's value (1 to `max`), or a UsageError naming the option. */
export function positiveInt(name: string, text: string, max = 1 << 30): number {
  return integerOption(name, text, 1, max);
}
