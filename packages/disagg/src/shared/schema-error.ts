import type { TSchema } from '@sinclair/typebox';
import type { TypeCheck } from '@sinclair/typebox/compiler';

/**
 * What is wrong with `value` for a refusal's message: its first bad field and why
 * ("/dp_size Expected integer"), "(body)" when the value as a whole is wrong.
 */
export function firstSchemaError(check: TypeCheck<TSchema>, value: unknown): string {
  const first = check.Errors(value).First();
  return first ? `${first.path || '(body)'} ${first.message}` : 'does not match its schema';
}
