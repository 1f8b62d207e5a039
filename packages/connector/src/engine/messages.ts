import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';

/**
 * The control-plane envelope, one definition for its type and its validation. Bodies are
 * the handlers' business (each checks its own); the envelope is checked before any field
 * is read, so a hostile message can never reach code that assumes its shape.
 */
/** Version of the control-plane envelope. Fields are appended and optional. */
export const CONTROL_VERSION = 1;

export const MAX_TYPE_LENGTH = 128;
/** Largest control message accepted (zeromq drops larger ones before they are buffered). */
export const MAX_CONTROL_MESSAGE_BYTES = 16 * 1024 * 1024;

export const RequestEnvelopeSchema = Type.Object({
  v: Type.Integer({ minimum: 0, maximum: 0xffff }),
  id: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  type: Type.String({ minLength: 1, maxLength: MAX_TYPE_LENGTH }),
  body: Type.Optional(Type.Unknown()),
});
export type RequestEnvelope = Static<typeof RequestEnvelopeSchema>;

export const ReplyEnvelopeSchema = Type.Object({
  v: Type.Integer({ minimum: 0, maximum: 0xffff }),
  id: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  ok: Type.Boolean(),
  body: Type.Optional(Type.Unknown()),
  code: Type.Optional(Type.String({ maxLength: 64 })),
  message: Type.Optional(Type.String({ maxLength: 4096 })),
});
export type ReplyEnvelope = Static<typeof ReplyEnvelopeSchema>;

export const checkRequestEnvelope = TypeCompiler.Compile(RequestEnvelopeSchema);
export const checkReplyEnvelope = TypeCompiler.Compile(ReplyEnvelopeSchema);

/** A correlation id salvaged from a malformed request, so its sender gets an error instead of a timeout. */
export function salvageId(value: unknown): number | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const id = (value as { id?: unknown }).id;
  return typeof id === 'number' && Number.isSafeInteger(id) && id >= 0 ? id : undefined;
}
