import type { TransferEngine, TransferError } from '@te/connector';
import type { RankDirectory } from '../bootstrap/directory.js';
import type { PrefillInfo } from '../bootstrap/schema.js';
import type { PageGeometry } from '../plan/page-geometry.js';
import type { HeadSlice } from '../plan/slice-copy.js';
import type { RequestMessage } from '../protocol/messages.js';
import type { DecodeLayout } from './decode-layout.js';
import type { Destination } from './destination.js';
import type { ChecksumMode } from './kv-checksum.js';
import type { KvStaging } from './kv-write.js';
import type { PDTimeouts } from './timeouts.js';
import type { SourceSide } from './transfer-plan.js';

/*
 * What one room needs of the rank that owns it, and nothing more: a sender or receiver is
 * given this context, never its rank, so it cannot reach into the rank's tables and neither
 * module imports the other. The rank builds one context and owns the room table.
 */

/** One decode rank's request for a room, with the destination it registered. */
export interface RoomRequest {
  req: RequestMessage;
  dest: Destination;
}

/** A prefill room as its rank's table sees it once it ended. */
export interface EndedPrefillRoom {
  readonly room: bigint;
  /** Decode segments a settled write may still land in (a cancel its transport could not confirm). */
  pagesMayBeWritten(): ReadonlySet<string>;
  /** The registrations the room wrote to. */
  destinations(): Destination[];
}

/** What a prefill room (its sender) uses of its rank. */
export interface PrefillRoomContext {
  /** Writes (`transfer`), status reports (`controlClient`), host views for checksums. */
  readonly engine: TransferEngine;
  readonly timeouts: PDTimeouts;
  /** This rank's buffers as numbers, its layout and layer span. */
  readonly source: SourceSide;
  readonly staging: KvStaging;
  /** Host views of the KV buffers when checksums are on (see kv-checksum.ts). */
  readonly checksumViews: Uint8Array[] | undefined;
  /** How KV integrity is checked (see kv-checksum.ts). */
  readonly checksums: ChecksumMode;
  /** A destination that failed at the connection level: its later rooms fail fast until it registers again. */
  markFailed(dest: Destination, error: TransferError): void;
  /** Completion: the room succeeded, or failed and every write of it settled. */
  ended(room: EndedPrefillRoom): void;
}

/** The staging ring's part in one decode room (see staging/decode-staging.ts). */
export interface DecodeRoomStaging {
  /** This rank's page geometry of KV buffer `buffer` (tokens, heads, head bytes, layout). */
  geometry(buffer: number): PageGeometry;
  /** Refuses every later scatter of the room. */
  refuse(room: bigint, error: TransferError): void;
  /** Resolves once no scatter of the room runs. */
  quiet(room: bigint): Promise<void>;
  /** Gives the room's ring space back. */
  release(room: bigint): void;
}

/** What a decode room (its receiver) uses of its rank. */
export interface DecodeRoomContext {
  /** Requests and aborts (`controlClient`), this rank's segment name, host views for checksums. */
  readonly engine: TransferEngine;
  readonly timeouts: PDTimeouts;
  /** This decode rank's layout and buffers, described once. */
  readonly decode: DecodeLayout;
  readonly staging: DecodeRoomStaging;
  /** The prefill instance's directory at `address` (bootstrap server or cluster store), shared by the rank's rooms. */
  directory(address: string): RankDirectory;
  /** Before registering with a prefill's ranks: the staging ring, when their slices need one here. */
  prepareStaging(info: PrefillInfo, slices: (HeadSlice | undefined)[]): Promise<void>;
  /** Registers this decode rank with a prefill rank, once (again with `force`). */
  ensureRegistered(segment: string, timeoutMs: number, force?: boolean): Promise<void>;
  /** Completion: the room succeeded or failed. */
  ended(room: { readonly room: bigint }): void;
}
