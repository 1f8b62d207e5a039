import { Type, type Static } from '@sinclair/typebox';
import { Uint32ArrayType } from './typed-arrays.js';
import { PD_PROTOCOL_VERSION, type RegisterMessage } from './messages.js';

/*
 * The staging ring of heterogeneous TP (decode TP below prefill TP with NHD pages): a
 * prefill rank asks the decode for ring space, writes its gathered head slices there, and
 * asks the decode to scatter them into the room's pages; it reports Success only after
 * every scatter was answered. Decode ranks serve both.
 */
export const STAGING_MSG = {
  ringAlloc: 'te.kv.d.ringAlloc',
  scatter: 'te.kv.d.scatter',
} as const;

const Int = (min = 0, max = 2 ** 52) => Type.Integer({ minimum: min, maximum: max });

/** Where a decode's staging ring is (engine addresses), as its registration carries it. */
export type RingWire = NonNullable<RegisterMessage['ring']>;

export const RingAllocSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  room: Type.BigInt({ minimum: 0n }),
  prefillTpRank: Int(0, 4095),
  prefillPpRank: Int(0, 1023),
  bytes: Int(1),
});
export type RingAllocMessage = Static<typeof RingAllocSchema>;

export const RingAllocReplySchema = Type.Object({ offset: Int(0) });

export const ScatterSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  room: Type.BigInt({ minimum: 0n }),
  prefillTpRank: Int(0, 4095),
  prefillPpRank: Int(0, 1023),
  /** The ring piece holding the image (from ringAlloc). */
  offset: Int(0),
  bytes: Int(1),
  /** Source pages [firstPage, firstPage + pageCount) of the room, in prefill pages. */
  firstPage: Int(0, 1 << 30),
  pageCount: Int(1, 1 << 30),
  /** Decode KV buffers the image fills, in image order (each holds pageCount pieces). */
  dstBuffers: Uint32ArrayType(),
  /** Image pieces [firstPiece, ...) of the (buffers × pages) sequence this piece of the ring holds. */
  firstPiece: Int(0),
  pieces: Int(1),
});
export type ScatterMessage = Static<typeof ScatterSchema>;
