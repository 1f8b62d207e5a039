import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import type { TSchema, Static } from '@sinclair/typebox';
import { TransferError, type TransferEngine } from '@te/connector';
import { firstSchemaError } from '../shared/schema-error.js';

// Compiling a schema costs far more than checking a body with it: each schema is compiled
// once, on first use, however many messages and replies it checks.
const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();
function checkerOf<S extends TSchema>(schema: S): TypeCheck<S> {
  let check = compiled.get(schema);
  if (!check) compiled.set(schema, (check = TypeCompiler.Compile(schema)));
  return check as TypeCheck<S>;
}

/**
 * Registers a control-plane handler whose body is checked against `schema` first: a
 * malformed or hostile message is answered with INVALID_ARGUMENT naming the first bad
 * field, and never reaches the handler.
 */
export function handleMessage<S extends TSchema>(engine: TransferEngine, type: string, schema: S, handler: (body: Static<S>) => unknown): () => void {
  const check = checkerOf(schema);
  return engine.control.handle(type, (body: unknown) => {
    if (!check.Check(body)) {
      throw new TransferError('INVALID_ARGUMENT', `malformed "${type}" message: ${firstSchemaError(check, body)}`);
    }
    return handler(body);
  });
}

/** Whether a reply matches its schema (a peer on another version, or a hostile one, may not). */
export function matchesReply<S extends TSchema>(schema: S, body: unknown): body is Static<S> {
  return checkerOf(schema).Check(body);
}

/** Checks a reply against its schema (a peer on another version, or a hostile one). */
export function checkReply<S extends TSchema>(type: string, schema: S, body: unknown): Static<S> {
  if (!matchesReply(schema, body)) throw new TransferError('PROTOCOL_MISMATCH', `malformed reply to "${type}"`);
  return body;
}
