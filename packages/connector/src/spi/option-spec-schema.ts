import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';

/*
 * What a plugin may declare for one option: checked by validatePlugin, so a wrong type or a
 * default that does not match it is refused at load time, naming the plugin and the option.
 */
const common = { env: Type.Optional(Type.String({ pattern: '^[A-Z][A-Z0-9_]*$' })), description: Type.String({ minLength: 1 }) };
const bounds = { min: Type.Optional(Type.Number()), max: Type.Optional(Type.Number()) };

export const OptionSpecSchema = Type.Union([
  Type.Object({ type: Type.Literal('string'), default: Type.Optional(Type.String()), pattern: Type.Optional(Type.Any()), ...common }),
  Type.Object({ type: Type.Literal('integer'), default: Type.Optional(Type.Integer()), ...bounds, ...common }),
  Type.Object({ type: Type.Literal('number'), default: Type.Optional(Type.Number()), ...bounds, ...common }),
  Type.Object({ type: Type.Literal('boolean'), default: Type.Optional(Type.Boolean()), ...common }),
  Type.Object({ type: Type.Literal('enum'), values: Type.Array(Type.String(), { minItems: 1 }), default: Type.Optional(Type.String()), ...common }),
  Type.Object({ type: Type.Literal('list'), default: Type.Optional(Type.Array(Type.String())), ...common }),
]);

export const checkOptionSpec = TypeCompiler.Compile(OptionSpecSchema);
