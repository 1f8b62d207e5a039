import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { TSchema, Static } from '@sinclair/typebox';
import { TransferError, type TransferEngine } from '@te/connector';

/**
 * Registers a control-plane handler whose body is checked against `schema` first: a
 * malformed or hostile message is answered with INVALID_ARGUMENT naming the first bad
 * field, and never reaches the handler.
 */
export function handleMessage<S extends TSchema>(engine: TransferEngine, type: string, schema: S, handler: (body: Static<S>) => unknown): () => void {
  const check = TypeCompiler.Compile(schema);
  return engine.control.handle(type, (body: unknown) => {
    if (!check.Check(body)) {
      const first = check.Errors(body).First();
      throw new TransferError('INVALID_ARGUMENT', `malformed "${type}" message: ${first ? `${first.path || '(body)'} ${first.message}` : 'does not match its schema'}`);
    }
    return handler(body);
  });
}

/** Checks a reply against its schema (a peer on another version, or a hostile one). */
export function checkReply<S extends TSchema>(type: string, schema: S, body: unknown): Static<S> {
  const check = TypeCompiler.Compile(schema);
  if (!check.Check(body)) throw new TransferError('PROTOCOL_MISMATCH', `malformed reply to "${type}"`);
  return body;
}
