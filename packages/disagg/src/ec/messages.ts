import { Type, type Static } from '@sinclair/typebox';
import { BigUint64ArrayType } from '../protocol/typed-arrays.js';

/*
 * Encoder-cache coordination over the engine's control plane. The consumer asks the
 * producer for items and says where each must land; the producer writes them (one batch)
 * into the consumer's registered memory and answers once the batch settled, per item.
 * Write-based, as vLLM's Mooncake EC connector: every transport can write, not every one
 * can read, and the producer knows exactly when its pool item is no longer read.
 */
export const EC_PROTOCOL_VERSION = 1;
export const EC_PULL = 'te.ec.pull';
export const MAX_ITEMS_PER_PULL = 4096;

/** The longest a pull may take: a producer refuses a pull asking for more. */
export const MAX_PULL_TIMEOUT_MS = 600_000;

export const PullSchema = Type.Object({
  v: Type.Literal(EC_PROTOCOL_VERSION),
  consumerSegment: Type.String({ minLength: 3, maxLength: 300 }),
  hashes: Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: MAX_ITEMS_PER_PULL }),
  addrs: BigUint64ArrayType(),
  lengths: BigUint64ArrayType(),
  timeoutMs: Type.Integer({ minimum: 1, maximum: MAX_PULL_TIMEOUT_MS }),
});
export type PullMessage = Static<typeof PullSchema>;

export const PullReplySchema = Type.Object({
  results: Type.Array(
    Type.Object({
      ok: Type.Boolean(),
      code: Type.Optional(Type.String({ maxLength: 64 })),
      message: Type.Optional(Type.String({ maxLength: 2000 })),
      /** Failed only: the producer's write may still land in the destination (its transport could not confirm the cancel). */
      destinationMayBeWritten: Type.Optional(Type.Boolean()),
      /** Written only, with checksums on: the item's CRC32C, checked by the consumer before it counts the item loaded. */
      crc32c: Type.Optional(Type.Integer({ minimum: 0, maximum: 0xffffffff })),
    }),
    { maxItems: MAX_ITEMS_PER_PULL },
  ),
});
export type PullReply = Static<typeof PullReplySchema>;
