import { TypeCompiler } from '@sinclair/typebox/compiler';
import { AbortReplySchema } from '../protocol/messages.js';

const check = TypeCompiler.Compile(AbortReplySchema);

/**
 * Whether a prefill rank's answer to an abort says a write of the room may still land in
 * the decode's pages. An answer of an older build (no field) or a malformed one says no
 * more than that the rank's writes settled.
 */
export function pagesMayBeWrittenReply(reply: unknown): boolean {
  return check.Check(reply) && reply.pagesMayBeWritten === true;
}
