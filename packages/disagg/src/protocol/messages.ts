import { Type, type Static } from '@sinclair/typebox';
import { BigUint64ArrayType, Uint32ArrayType } from './typed-arrays.js';

/*
 * The rank-to-rank PD protocol over the engine's zeromq control plane. Every message is a
 * request with a reply; bodies are msgpack with u64 as bigint and index lists as typed
 * arrays. New fields are appended as optional, so an older peer still parses them.
 * Prefill ranks serve `te.kv.p.*`, decode ranks serve `te.kv.d.*`.
 */
export const PD_PROTOCOL_VERSION = 1;

export const MSG = {
  register: 'te.kv.p.register',
  request: 'te.kv.p.request',
  abort: 'te.kv.p.abort',
  ping: 'te.kv.p.ping',
  status: 'te.kv.d.status',
  sums: 'te.kv.d.sums',
  decodePing: 'te.kv.d.ping',
} as const;

const Int = (min = 0, max = 1 << 30) => Type.Integer({ minimum: min, maximum: max });

export const BufferTableSchema = Type.Object({
  addrs: BigUint64ArrayType(),
  lengths: BigUint64ArrayType(),
  itemLens: BigUint64ArrayType(),
});
export type BufferTableWire = Static<typeof BufferTableSchema>;

/** Decode → prefill, once per (decode rank, prefill rank): where and how the decode keeps its KV. */
export const RegisterSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  decodeSegment: Type.String({ minLength: 1, maxLength: 300 }),
  epoch: Type.BigInt(),
  tpSize: Int(1, 4096),
  tpRank: Int(0, 4095),
  ppSize: Int(1, 1024),
  ppRank: Int(0, 1023),
  attention: Type.Union([Type.Literal('mha'), Type.Literal('mla')]),
  pageSize: Int(1),
  kvCacheDtype: Type.String({ maxLength: 64 }),
  firstLayer: Int(0),
  numLayers: Int(1),
  totalLayers: Int(1),
  kvHeadsPerRank: Type.Optional(Int(1)),
  totalKvHeads: Type.Optional(Int(1)),
  /** How a page is laid out (absent: NHD). */
  pageLayout: Type.Optional(Type.Union([Type.Literal('NHD'), Type.Literal('HND')])),
  /** The staging ring this decode offers for slices it must interleave (see staging-messages.ts). */
  ring: Type.Optional(Type.Object({ addr: Type.BigInt({ minimum: 0n }), length: Type.BigInt({ minimum: 1n }) })),
  kv: BufferTableSchema,
  aux: BufferTableSchema,
  state: Type.Optional(
    Type.Object({
      kind: Type.Union([Type.Literal('mamba'), Type.Literal('swa')]),
      table: BufferTableSchema,
      totalUnits: Type.Optional(Int(1)),
    }),
  ),
});
export type RegisterMessage = Static<typeof RegisterSchema>;

export const RegisterReplySchema = Type.Object({ tpRank: Int(), ppRank: Int() });

const SliceSchema = Type.Object({ srcOffset: Int(), dstOffset: Int(), count: Int() });
export type SliceWire = Static<typeof SliceSchema>;

/** Decode → prefill, per request and target rank: the destination of the room's KV. */
export const RequestSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  room: Type.BigInt({ minimum: 0n }),
  decodeSegment: Type.String({ minLength: 1, maxLength: 300 }),
  decodeTpRank: Int(0, 4095),
  pages: Uint32ArrayType(),
  auxIndex: Int(0),
  stateIndices: Type.Optional(Uint32ArrayType()),
  /** Decode ranks this prefill rank must hear from before the room is ready. */
  requiredDecodeRanks: Int(1, 4096),
  /** Heads this prefill rank sends (absent: whole pages). */
  kvSlice: Type.Optional(SliceSchema),
  stateSlice: Type.Optional(SliceSchema),
  /** Send no KV (MLA replicas, covered GQA replicas); still report success. */
  dummy: Type.Boolean(),
  /** This rank writes the aux slot (one rank per decode rank: the last PP stage's first target). */
  sendsAux: Type.Boolean(),
  /** This rank writes the state (absent stateSlice with state: whole items). */
  sendsState: Type.Boolean(),
});
export type RequestMessage = Static<typeof RequestSchema>;

/** Prefill → decode: a room's result from one prefill rank, after its writes settled. */
export const StatusSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  room: Type.BigInt({ minimum: 0n }),
  prefillTpRank: Int(0, 4095),
  prefillPpRank: Int(0, 1023),
  /** KVStatus: Success (4) or Failed (0). */
  status: Type.Union([Type.Literal(0), Type.Literal(4)]),
  code: Type.Optional(Type.String({ maxLength: 64 })),
  message: Type.Optional(Type.String({ maxLength: 2000 })),
  bytes: Type.Optional(Type.Number({ minimum: 0 })),
  /** Failed only: a write of the room to this decode may still land in its pages (its transport could not confirm the cancel). */
  pagesMayBeWritten: Type.Optional(Type.Boolean()),
  /**
   * Success only, with KV checksums on: a CRC32C per piece (one source page's head slice of
   * one layer buffer, as it lies in the decode's page; see pd/kv-checksum.ts), per source
   * page of the room (room order) per layer buffer written, page-major.
   */
  kvCrc32c: Type.Optional(Uint32ArrayType()),
  /** The absolute layers `kvCrc32c` covers ([first, first + count), K then V per MHA layer). */
  checksumLayers: Type.Optional(Type.Object({ first: Int(0), count: Int(1, 4096) })),
  /** Success only, with KV checksums on: a CRC32C of the aux slot written, per aux buffer. */
  auxCrc32c: Type.Optional(Uint32ArrayType()),
  /** The room's KV to this rank went as verified writes (the transport compared digests of what was sent and what landed) instead of with kvCrc32c. */
  kvVerifiedInTransfer: Type.Optional(Type.Literal(true)),
  /** Success only, with KV checksums on: a CRC32C per state buffer written (`stateBuffers`, the decode's) per state slot of the room, buffer-major. */
  stateCrc32c: Type.Optional(Uint32ArrayType()),
  stateBuffers: Type.Optional(Uint32ArrayType()),
});
export type StatusMessage = Static<typeof StatusSchema>;

/**
 * Prefill → decode, with KV checksums on: a chunk of a room (not its last) was written and
 * settled; its pages' checksums (as in StatusSchema.kvCrc32c, for the room's pages
 * [firstPage, firstPage + n)), so the decode checks them while the rest is written. The
 * Success report still carries every page's checksums; pages checked here are not read again.
 */
export const SumsSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  room: Type.BigInt({ minimum: 0n }),
  prefillTpRank: Int(0, 4095),
  prefillPpRank: Int(0, 1023),
  /** The chunk's first page, in room order (the prefill's page count before the chunk). */
  firstPage: Int(0),
  kvCrc32c: Uint32ArrayType(),
  checksumLayers: Type.Object({ first: Int(0), count: Int(1, 4096) }),
});
export type SumsMessage = Static<typeof SumsSchema>;

/** Decode → prefill: stop writing this room; the reply comes once no write can still land. */
export const AbortSchema = Type.Object({
  v: Type.Literal(PD_PROTOCOL_VERSION),
  room: Type.BigInt({ minimum: 0n }),
  decodeSegment: Type.String({ minLength: 1, maxLength: 300 }),
  reason: Type.Optional(Type.String({ maxLength: 2000 })),
  /** Set when the decode was refused (LAYOUT_MISMATCH...): the room fails with this code and the reason. */
  code: Type.Optional(Type.String({ maxLength: 64 })),
});
export type AbortMessage = Static<typeof AbortSchema>;

/** The prefill's answer to an abort, once no write of the room is in flight. */
export const AbortReplySchema = Type.Object({
  settled: Type.Literal(true),
  status: Type.Integer({ minimum: 0, maximum: 4 }),
  /** A write of the room to this decode may still land in its pages (its transport could not confirm the cancel). */
  pagesMayBeWritten: Type.Optional(Type.Boolean()),
});
export type AbortReply = Static<typeof AbortReplySchema>;

export const PingSchema = Type.Object({ v: Type.Literal(PD_PROTOCOL_VERSION) });
