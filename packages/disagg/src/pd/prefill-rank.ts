import { KVStatus, TransferError, type TransferErrorCode, type BootstrapInfo, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { BootstrapClient } from '../bootstrap/client.js';
import type { RankDirectory } from '../bootstrap/directory.js';
import type { RankRegistration } from '../bootstrap/schema.js';
import { handleMessage } from '../protocol/handle.js';
import {
  AbortSchema,
  MSG,
  PD_PROTOCOL_VERSION,
  PingSchema,
  RegisterSchema,
  RequestSchema,
  type AbortMessage,
  type AbortReply,
  type RegisterMessage,
  type RequestMessage,
} from '../protocol/messages.js';
import { acceptDestination, type Destination } from './destination.js';
import { DestinationTable } from './destination-table.js';
import { Heartbeat, keepRegistered, pingPeer } from './heartbeat.js';
import { PrefillSender } from './kv-sender.js';
import { PrefillRoomTable } from './prefill-rooms.js';
import type { EndedPrefillRoom, PrefillRoomContext, RoomRequest } from './room-context.js';
import { tableOf } from './local-buffers.js';
import { REFUSAL_CODES } from './refusal.js';
import { checksumMode, viewsOf } from './kv-checksum.js';
import type { PDTimeouts } from './timeouts.js';
import { waitAtMost } from '../shared/wait-at-most.js';
import type { SourceSide } from './transfer-plan.js';
import { PrefillStaging } from '../staging/kv-staging.js';
import { resolveStaging, type ResolvedStaging } from '../staging/options.js';

const MAX_DESTINATIONS = 4_096;

export interface PrefillRankLimits {
  /** Decode ranks registered at once (default 4096); past it, failed then idle ones are evicted. */
  maxDestinations?: number;
  /** The staging path of heterogeneous TP (default: resolveStaging()). */
  staging?: ResolvedStaging;
  /** Debug lines (staging fallbacks). */
  log?: (message: string) => void;
  /** KV integrity checks (default: TE_KV_CHECKSUMS; see kv-checksum.ts): true (the transport's digests where they cover a write, else page checksums), 'pages', false. */
  checksums?: boolean | 'pages';
}

/**
 * One prefill rank: serves decode ranks' registrations, requests and aborts on the
 * engine's control plane, and owns its rooms (a room table: waiting, live, refused,
 * finished) and the decode ranks registered with it (a destination table).
 */
export class PrefillRank {
  readonly source: SourceSide;
  /** Gather/scatter staging of head slices (created on first use). */
  readonly staging: PrefillStaging;
  /** Host views of the KV buffers when checksums are on and every buffer is host memory. */
  readonly checksumViews: Uint8Array[] | undefined;
  /** Registered decode ranks (see destination-table.ts). */
  private readonly destinations: DestinationTable;
  private readonly rooms = new PrefillRoomTable();
  /** What each room is given of this rank (see room-context.ts); one object, so per-rank caches can key on it. */
  private readonly roomContext: PrefillRoomContext;
  private readonly unhandle: (() => void)[] = [];
  private readonly heartbeat: Heartbeat;
  private readonly sweeper: NodeJS.Timeout;
  private stopRegistration: (() => void) | undefined;

  constructor(
    readonly engine: TransferEngine,
    readonly layout: ParallelLayout,
    readonly buffers: KVBuffers,
    readonly timeouts: PDTimeouts,
    private readonly directoryOf: (address: string) => RankDirectory = (address) => new BootstrapClient(address),
    limits: PrefillRankLimits = {},
  ) {
    this.destinations = new DestinationTable(limits.maxDestinations ?? MAX_DESTINATIONS, () => this.destinationsInUse());
    this.source = {
      buffers,
      layout,
      kv: tableOf(buffers.kv, 'KV'),
      aux: tableOf(buffers.aux, 'aux'),
      state: buffers.state ? tableOf(buffers.state, 'state') : undefined,
      span: { firstLayer: buffers.firstLayer ?? 0, layers: buffers.numLayers },
    };
    this.staging = new PrefillStaging(engine, limits.staging ?? resolveStaging(), this.source.kv, buffers.device, limits.log ?? (() => undefined));
    const mode = checksumMode(limits.checksums);
    const views = mode !== 'off' ? viewsOf(engine, this.source.kv) : undefined;
    this.checksumViews = views?.every((v) => v !== undefined) ? (views as Uint8Array[]) : undefined;
    this.roomContext = {
      engine,
      timeouts,
      source: this.source,
      staging: this.staging,
      checksumViews: this.checksumViews,
      checksums: mode,
      markFailed: (dest, error) => this.markFailed(dest, error),
      ended: (room) => this.forget(room),
    };
    this.unhandle.push(
      handleMessage(engine, MSG.register, RegisterSchema, (m) => this.onRegister(m)),
      handleMessage(engine, MSG.request, RequestSchema, (m) => this.onRequest(m)),
      handleMessage(engine, MSG.abort, AbortSchema, (m) => this.onAbort(m)),
      handleMessage(engine, MSG.ping, PingSchema, () => ({ v: PD_PROTOCOL_VERSION })),
    );
    this.heartbeat = new Heartbeat(
      timeouts.heartbeatMs,
      timeouts.heartbeatMaxFailures,
      () => new Set(this.rooms.senders().flatMap((s) => (s.status < KVStatus.Success && s.status !== KVStatus.Failed ? s.segments() : []))),
      (segment, timeoutMs) => pingPeer(engine, segment, MSG.decodePing, timeoutMs),
      (segment) => this.onDecodeLost(segment),
    );
    this.heartbeat.start();
    this.sweeper = setInterval(() => this.sweep(), Math.min(timeouts.bootstrapMs, 10_000));
    this.sweeper.unref();
  }

  /** What this rank registers with its instance's bootstrap server. */
  registration(): RankRegistration {
    const b = this.buffers;
    const l = this.layout;
    const r: RankRegistration = {
      attn_tp_size: l.attnTpSize,
      attn_tp_rank: l.attnTpRank,
      attn_dp_size: l.attnDpSize,
      attn_dp_rank: l.attnDpRank,
      pp_size: l.ppSize,
      pp_rank: l.ppRank,
      system_dp_size: l.systemDpSize,
      system_dp_rank: l.systemDpRank,
      endpoint: this.engine.segmentName,
      page_size: b.pageSize,
      kv_cache_dtype: b.kvCacheDtype,
      attention: b.attention,
      num_layers: b.totalLayers ?? b.numLayers,
      first_layer: b.firstLayer ?? 0,
      stage_layers: b.numLayers,
    };
    if (b.totalKvHeads !== undefined) r.total_kv_heads = b.totalKvHeads;
    return r;
  }

  async registerWith(bootstrapAddress: string): Promise<void> {
    const directory = this.directoryOf(bootstrapAddress);
    await directory.register(this.registration(), this.timeouts.bootstrapMs);
    this.stopRegistration?.();
    this.stopRegistration = keepRegistered(directory, () => this.registration(), this.timeouts.heartbeatMs);
  }

  createSender(bootstrap: BootstrapInfo): PrefillSender {
    return this.rooms.open(bootstrap.room, () => new PrefillSender(this.roomContext, bootstrap));
  }

  /** A sender ended (succeeded, or failed with every write settled). */
  private forget(sender: EndedPrefillRoom): void {
    this.rooms.ended(sender);
    if (sender.destinations().some((d) => d.lost)) this.destinations.dropLost();
  }

  /** How many decode ranks are registered now. */
  get destinationCount(): number {
    return this.destinations.size;
  }

  /** Destinations a live sender or a room waiting for its sender still refers to. */
  private *destinationsInUse(): Iterable<Destination> {
    for (const s of this.rooms.senders()) yield* s.destinations();
    for (const rr of this.rooms.waitingRequests()) yield rr.dest;
  }

  /** A destination that failed at the connection level fails its later rooms fast until it registers again. */
  private markFailed(dest: Destination, error: TransferError): void {
    dest.failed ??= error;
  }

  private onRegister(m: RegisterMessage): { tpRank: number; ppRank: number } {
    this.destinations.register(`${m.decodeSegment}#${m.tpRank}`, acceptDestination(m, this.buffers, this.layout));
    return { tpRank: this.layout.attnTpRank, ppRank: this.layout.ppRank };
  }

  private onRequest(m: RequestMessage): { accepted: true } {
    const dest = this.destinations.use(`${m.decodeSegment}#${m.decodeTpRank}`);
    if (!dest)
      throw new TransferError('STALE_DESCRIPTOR', `decode rank ${m.decodeSegment}#${m.decodeTpRank} is not registered with this prefill rank; register first`);
    const refused = this.rooms.refusal(m.room);
    if (refused) throw refused;
    if (dest.failed) throw new TransferError('PEER_FAILED', `destination ${dest.segment} failed before (${dest.failed.message}); register again`);
    try {
      this.checkRequest(m, dest);
    } catch (e) {
      // A destination that can never be served fails the room here too, not at the bootstrap timeout.
      this.rooms.refuse(m.room, e as TransferError);
      throw e;
    }
    const rr: RoomRequest = { req: m, dest };
    this.rooms.request(m.room, rr);
    return { accepted: true };
  }

  /** Bounds a request against both layouts before it is ever planned. */
  private checkRequest(m: RequestMessage, dest: Destination): void {
    const dstPages = Math.floor(dest.kv.lengths[0]! / dest.kv.itemLens[0]!);
    for (let i = 0; i < m.pages.length; i++)
      if (m.pages[i]! >= dstPages)
        throw new TransferError('ADDRESS_OUT_OF_RANGE', `room ${m.room}: destination page ${m.pages[i]} is outside the decode's ${dstPages} pages`);
    if (m.sendsAux && dest.aux.addrs.length > 0 && m.auxIndex >= Math.floor(dest.aux.lengths[0]! / dest.aux.itemLens[0]!))
      throw new TransferError('ADDRESS_OUT_OF_RANGE', `room ${m.room}: aux slot ${m.auxIndex} is outside the decode's aux buffer`);
    if (m.kvSlice && m.kvSlice.count === 0 && !m.dummy) throw new TransferError('INVALID_ARGUMENT', `room ${m.room}: empty head slice on a non-dummy request`);
  }

  private async onAbort(m: AbortMessage): Promise<AbortReply> {
    // A decode the layout cannot serve was refused (at bootstrap, by its planning or at
    // registration): the room fails with its code and reason, not as a plain abort.
    const refusal =
      m.code !== undefined && (REFUSAL_CODES.has(m.code) || m.code === 'DATA_CORRUPTED')
        ? new TransferError(
            m.code as TransferErrorCode,
            `room ${m.room}: decode ${m.decodeSegment} ${m.code === 'DATA_CORRUPTED' ? 'found the KV it received corrupted' : 'was refused'}: ${m.reason ?? 'no reason given'}`,
            { details: { room: m.room, segment: m.decodeSegment } },
          )
        : undefined;
    const room = this.rooms.get(m.room);
    // Finished: its Failed report said whether its writes may still land, but a decode
    // that is failing the room itself takes no report, only this answer.
    if (room?.state === 'finished') return abortReply(KVStatus.Failed, room.segments.has(m.decodeSegment));
    const sender = room?.state === 'live' ? room.sender : undefined;
    if (!sender) {
      // Not started (or already finished): remember it so a later sender fails at once.
      this.rooms.refuse(
        m.room,
        refusal ??
          new TransferError('ABORTED', `room ${m.room} was aborted by decode ${m.decodeSegment} before the prefill started it`, { details: { room: m.room } }),
      );
      return { settled: true, status: KVStatus.Failed };
    }
    if (sender.status !== KVStatus.Success)
      sender.fail(
        refusal ??
          new TransferError('ABORTED', `room ${m.room}: aborted by decode ${m.decodeSegment}${m.reason ? `: ${m.reason}` : ''}`, { details: { room: m.room } }),
      );
    await sender.settled();
    return abortReply(sender.status, sender.pagesMayBeWritten().has(m.decodeSegment));
  }

  private onDecodeLost(segment: string): void {
    for (const s of this.rooms.senders()) {
      if (s.segments().includes(segment))
        s.failUnlessReporting(
          new TransferError('PEER_FAILED', `room ${s.room}: decode ${segment} stopped answering heartbeats`, { details: { room: s.room, segment } }),
        );
    }
    // Failed senders stay until their writes settled (forget() drops the rest then).
    this.destinations.lose(segment);
  }

  /** Forgets waiting requests and ended rooms older than the bootstrap timeout. */
  private sweep(): void {
    this.rooms.sweep(Date.now() - this.timeouts.bootstrapMs);
    this.destinations.dropLost();
  }

  async close(): Promise<void> {
    this.heartbeat.stop();
    clearInterval(this.sweeper);
    this.stopRegistration?.();
    const live = this.rooms.senders();
    for (const s of live) s.fail(new TransferError('ENGINE_CLOSED', `room ${s.room}: the KV manager closed`, { details: { room: s.room } }));
    // Writes settle by their deadline, or later when a transport holds one past it (their
    // decodes are told only then); closing waits for that at most `abortMs`. What is
    // still held keeps its memory marked in use in the engine until the transport lets go.
    await waitAtMost(Promise.all(live.map((s) => s.settled())), this.timeouts.abortMs);
    for (const u of this.unhandle) u();
    await this.staging.close();
  }
}

/** The answer to an abort once the room's writes settled; `written`: one to this decode may still land. */
function abortReply(status: KVStatus, written: boolean): AbortReply {
  return written ? { settled: true, status, pagesMayBeWritten: true } : { settled: true, status };
}
