import { KVStatus, TransferError, isTransferError, type TransferErrorCode, type BootstrapInfo, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { BootstrapClient } from '../bootstrap/client.js';
import type { RankDirectory } from '../bootstrap/directory.js';
import type { RankRegistration } from '../bootstrap/schema.js';
import { handleMessage } from '../protocol/handle.js';
import { AbortSchema, MSG, PD_PROTOCOL_VERSION, PingSchema, RegisterSchema, RequestSchema, type AbortMessage, type AbortReply, type RequestMessage } from '../protocol/messages.js';
import { acceptDestination, type Destination } from './destination.js';
import { Heartbeat } from './heartbeat.js';
import { PrefillSender, type RoomRequest } from './kv-sender.js';
import { tableOf } from './local-buffers.js';
import { REFUSAL_CODES } from './refusal.js';
import { checksumsEnabled, viewsOf } from './kv-checksum.js';
import type { PDTimeouts } from './timeouts.js';
import { waitAtMost } from '../shared/wait-at-most.js';
import type { SourceSide } from './transfer-plan.js';
import { PrefillStaging } from '../staging/kv-staging.js';
import { resolveStaging, type ResolvedStaging } from '../staging/options.js';

// Requests for rooms whose sender does not exist yet are kept this long at most, and at
// most this many: a decode may be ahead of the prefill, a hostile peer must not grow memory.
const MAX_PENDING_ROOMS = 65_536;
const MAX_DESTINATIONS = 4_096;

export interface PrefillRankLimits {
  /** Decode ranks registered at once (default 4096); past it, failed then idle ones are evicted. */
  maxDestinations?: number;
  /** The staging path of heterogeneous TP (default: resolveStaging()). */
  staging?: ResolvedStaging;
  /** Debug lines (staging fallbacks). */
  log?: (message: string) => void;
  /** KV checksums with each Success report (default: TE_KV_CHECKSUMS; see kv-checksum.ts). */
  checksums?: boolean;
}

/**
 * One prefill rank: serves decode ranks' registrations, requests and aborts on the
 * engine's control plane, and owns the senders of its rooms.
 */
export class PrefillRank {
  readonly source: SourceSide;
  /** Gather/scatter staging of head slices (created on first use). */
  readonly staging: PrefillStaging;
  /** Host views of the KV buffers when checksums are on and every buffer is host memory. */
  readonly checksumViews: Uint8Array[] | undefined;
  /**
   * Registered decode ranks by `segment#tpRank`, least recently used first (registering or
   * requesting moves an entry to the end). Bounded: a decode lost to the heartbeat is
   * dropped once no room uses it, and at the cap a failed, else the oldest idle, entry is
   * evicted (a live decode that was evicted hears STALE_DESCRIPTOR and registers again).
   */
  private readonly destinations = new Map<string, Destination>();
  private readonly maxDestinations: number;
  private readonly senders = new Map<bigint, PrefillSender>();
  private readonly pending = new Map<bigint, { requests: RoomRequest[]; at: number }>();
  /** Rooms that can no longer succeed here (aborted by the decode, or refused), with why. */
  private readonly aborted = new Map<bigint, { at: number; error: TransferError }>();
  /** Finished rooms with a write that settled unconfirmed, and the decodes it may still land in (for a late abort). */
  private readonly unconfirmed = new Map<bigint, { at: number; segments: ReadonlySet<string> }>();
  private readonly unhandle: (() => void)[] = [];
  private readonly heartbeat: Heartbeat;
  private readonly sweeper: NodeJS.Timeout;
  private reregister: NodeJS.Timeout | undefined;

  constructor(
    readonly engine: TransferEngine,
    readonly layout: ParallelLayout,
    readonly buffers: KVBuffers,
    readonly timeouts: PDTimeouts,
    private readonly directoryOf: (address: string) => RankDirectory = (address) => new BootstrapClient(address),
    limits: PrefillRankLimits = {},
  ) {
    this.maxDestinations = limits.maxDestinations ?? MAX_DESTINATIONS;
    this.source = {
      buffers,
      layout,
      kv: tableOf(buffers.kv, 'KV'),
      aux: tableOf(buffers.aux, 'aux'),
      state: buffers.state ? tableOf(buffers.state, 'state') : undefined,
      span: { firstLayer: buffers.firstLayer ?? 0, layers: buffers.numLayers },
    };
    this.staging = new PrefillStaging(engine, limits.staging ?? resolveStaging(), this.source.kv, buffers.device, limits.log ?? (() => undefined));
    const views = checksumsEnabled(limits.checksums) ? viewsOf(engine, this.source.kv) : undefined;
    this.checksumViews = views?.every((v) => v !== undefined) ? (views as Uint8Array[]) : undefined;
    this.unhandle.push(
      handleMessage(engine, MSG.register, RegisterSchema, (m) => this.onRegister(m)),
      handleMessage(engine, MSG.request, RequestSchema, (m) => this.onRequest(m)),
      handleMessage(engine, MSG.abort, AbortSchema, (m) => this.onAbort(m)),
      handleMessage(engine, MSG.ping, PingSchema, () => ({ v: PD_PROTOCOL_VERSION })),
    );
    this.heartbeat = new Heartbeat(
      timeouts.heartbeatMs,
      timeouts.heartbeatMaxFailures,
      () => new Set([...this.senders.values()].flatMap((s) => (s.status < KVStatus.Success && s.status !== KVStatus.Failed ? s.segments() : []))),
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
    // A bootstrap server that restarts (its process, or the rank hosting it) comes back
    // empty, and an etcd record can lapse with a stalled rank's lease: checked every
    // heartbeat and registered again, or the instance would never be ready again.
    let checking = false;
    clearInterval(this.reregister);
    this.reregister = setInterval(() => {
      if (checking) return;
      checking = true;
      directory
        .ensureRegistered(this.registration(), this.timeouts.heartbeatMs)
        .catch(() => undefined)
        .finally(() => (checking = false));
    }, this.timeouts.heartbeatMs);
    this.reregister.unref();
  }

  createSender(bootstrap: BootstrapInfo): PrefillSender {
    if (this.senders.has(bootstrap.room)) throw new TransferError('INVALID_ARGUMENT', `room ${bootstrap.room} already has a sender on this rank`);
    const sender = new PrefillSender(this, bootstrap);
    const ended = this.aborted.get(bootstrap.room);
    if (ended) {
      this.aborted.delete(bootstrap.room);
      sender.fail(ended.error);
      return sender;
    }
    this.senders.set(bootstrap.room, sender);
    const waiting = this.pending.get(bootstrap.room);
    this.pending.delete(bootstrap.room);
    for (const rr of waiting?.requests ?? []) {
      try {
        sender.addRequest(rr);
      } catch {
        // the sender is failed and reports it
      }
    }
    return sender;
  }

  forget(sender: PrefillSender): void {
    if (this.senders.get(sender.room) === sender) this.senders.delete(sender.room);
    const segments = sender.pagesMayBeWritten();
    if (segments.size > 0 && this.unconfirmed.size < MAX_PENDING_ROOMS) this.unconfirmed.set(sender.room, { at: Date.now(), segments });
    if (sender.destinations().some((d) => d.lost)) this.dropLost();
  }

  /** How many decode ranks are registered now. */
  get destinationCount(): number {
    return this.destinations.size;
  }

  /** Destinations a live sender or a room waiting for its sender still refers to. */
  private destinationsInUse(): Set<Destination> {
    const used = new Set<Destination>();
    for (const s of this.senders.values()) for (const d of s.destinations()) used.add(d);
    for (const p of this.pending.values()) for (const rr of p.requests) used.add(rr.dest);
    return used;
  }

  /** Drops the destinations whose decode was lost and that no room uses any more. */
  private dropLost(): void {
    let used: Set<Destination> | undefined;
    for (const [key, d] of this.destinations) {
      if (!d.lost) continue;
      used ??= this.destinationsInUse();
      if (!used.has(d)) this.destinations.delete(key);
    }
  }

  /** Makes room for one more destination: a failed one no room uses, else the least recently used idle one. */
  private evictDestination(): void {
    const used = this.destinationsInUse();
    let victim: string | undefined;
    for (const [key, d] of this.destinations) {
      if (used.has(d)) continue;
      if (d.failed) {
        victim = key;
        break;
      }
      victim ??= key;
    }
    if (victim === undefined) throw new TransferError('POOL_EXHAUSTED', `${this.maxDestinations} decode ranks are registered and every one has a room in flight; retry later`);
    this.destinations.delete(victim);
  }

  /** A destination that failed at the connection level fails its later rooms fast until it registers again. */
  markFailed(dest: Destination, error: TransferError): void {
    dest.failed ??= error;
  }

  private onRegister(m: import('../protocol/messages.js').RegisterMessage): { tpRank: number; ppRank: number } {
    const dest = acceptDestination(m, this.buffers, this.layout);
    const key = `${m.decodeSegment}#${m.tpRank}`;
    if (!this.destinations.delete(key) && this.destinations.size >= this.maxDestinations) this.evictDestination();
    // Registering again (a restart: new epoch) replaces the old table and clears its failure.
    this.destinations.set(key, dest);
    return { tpRank: this.layout.attnTpRank, ppRank: this.layout.ppRank };
  }

  private onRequest(m: RequestMessage): { accepted: true } {
    const key = `${m.decodeSegment}#${m.decodeTpRank}`;
    const dest = this.destinations.get(key);
    if (!dest) throw new TransferError('STALE_DESCRIPTOR', `decode rank ${m.decodeSegment}#${m.decodeTpRank} is not registered with this prefill rank; register first`);
    // Most recently used last: eviction at the cap takes the idle ones first.
    this.destinations.delete(key);
    this.destinations.set(key, dest);
    const ended = this.aborted.get(m.room);
    if (ended) throw ended.error;
    if (dest.failed) throw new TransferError('PEER_FAILED', `destination ${dest.segment} failed before (${dest.failed.message}); register again`);
    try {
      this.checkRequest(m, dest);
    } catch (e) {
      // A destination that can never be served fails the room here too, not at the bootstrap timeout.
      this.endRoom(m.room, e as TransferError);
      throw e;
    }
    const rr: RoomRequest = { req: m, dest };
    const sender = this.senders.get(m.room);
    if (sender) {
      sender.addRequest(rr);
    } else {
      let p = this.pending.get(m.room);
      if (!p) {
        if (this.pending.size >= MAX_PENDING_ROOMS) throw new TransferError('POOL_EXHAUSTED', `${MAX_PENDING_ROOMS} rooms already wait for their prefill; retry later`);
        p = { requests: [], at: Date.now() };
        this.pending.set(m.room, p);
      }
      if (p.requests.length >= 4096) throw new TransferError('INVALID_ARGUMENT', `room ${m.room}: too many requests`);
      p.requests.push(rr);
    }
    return { accepted: true };
  }

  /** Bounds a request against both layouts before it is ever planned. */
  private checkRequest(m: RequestMessage, dest: Destination): void {
    const dstPages = Math.floor(dest.kv.lengths[0]! / dest.kv.itemLens[0]!);
    for (let i = 0; i < m.pages.length; i++) if (m.pages[i]! >= dstPages) throw new TransferError('ADDRESS_OUT_OF_RANGE', `room ${m.room}: destination page ${m.pages[i]} is outside the decode's ${dstPages} pages`);
    if (m.sendsAux && dest.aux.addrs.length > 0 && m.auxIndex >= Math.floor(dest.aux.lengths[0]! / dest.aux.itemLens[0]!)) throw new TransferError('ADDRESS_OUT_OF_RANGE', `room ${m.room}: aux slot ${m.auxIndex} is outside the decode's aux buffer`);
    if (m.kvSlice && m.kvSlice.count === 0 && !m.dummy) throw new TransferError('INVALID_ARGUMENT', `room ${m.room}: empty head slice on a non-dummy request`);
  }

  /** Fails a room now, or when its sender is created. */
  private endRoom(room: bigint, error: TransferError): void {
    const sender = this.senders.get(room);
    if (sender) return sender.fail(error);
    this.pending.delete(room);
    if (this.aborted.size < MAX_PENDING_ROOMS) this.aborted.set(room, { at: Date.now(), error });
  }

  private async onAbort(m: AbortMessage): Promise<AbortReply> {
    // A decode the layout cannot serve was refused (at bootstrap, by its planning or at
    // registration): the room fails with its code and reason, not as a plain abort.
    const refusal = m.code !== undefined && (REFUSAL_CODES.has(m.code) || m.code === 'DATA_CORRUPTED') ? new TransferError(m.code as TransferErrorCode, `room ${m.room}: decode ${m.decodeSegment} ${m.code === 'DATA_CORRUPTED' ? 'found the KV it received corrupted' : 'was refused'}: ${m.reason ?? 'no reason given'}`, { details: { room: m.room, segment: m.decodeSegment } }) : undefined;
    const sender = this.senders.get(m.room);
    if (!sender) {
      // Finished: its Failed report said whether its writes may still land, but a decode
      // that is failing the room itself takes no report, only this answer.
      const unconfirmed = this.unconfirmed.get(m.room);
      if (unconfirmed) return abortReply(KVStatus.Failed, unconfirmed.segments.has(m.decodeSegment));
      // Not started (or already finished): remember it so a later sender fails at once.
      this.endRoom(m.room, refusal ?? new TransferError('ABORTED', `room ${m.room} was aborted by decode ${m.decodeSegment} before the prefill started it`, { details: { room: m.room } }));
      return { settled: true, status: KVStatus.Failed };
    }
    if (sender.status !== KVStatus.Success) sender.fail(refusal ?? new TransferError('ABORTED', `room ${m.room}: aborted by decode ${m.decodeSegment}${m.reason ? `: ${m.reason}` : ''}`, { details: { room: m.room } }));
    await sender.settled();
    return abortReply(sender.status, sender.pagesMayBeWritten().has(m.decodeSegment));
  }

  private onDecodeLost(segment: string): void {
    for (const s of [...this.senders.values()]) {
      if (s.segments().includes(segment)) s.failUnlessReporting(new TransferError('PEER_FAILED', `room ${s.room}: decode ${segment} stopped answering heartbeats`, { details: { room: s.room, segment } }));
    }
    for (const d of this.destinations.values()) {
      if (d.segment !== segment) continue;
      d.failed ??= new TransferError('PEER_FAILED', `decode ${segment} stopped answering heartbeats`);
      d.lost = true;
    }
    // Failed senders stay until their writes settled (forget() drops the rest then).
    this.dropLost();
  }

  /** Drops requests and abort marks older than the bootstrap timeout. */
  private sweep(): void {
    const horizon = Date.now() - this.timeouts.bootstrapMs;
    for (const [room, p] of this.pending) if (p.at < horizon) this.pending.delete(room);
    for (const [room, e] of this.aborted) if (e.at < horizon) this.aborted.delete(room);
    for (const [room, u] of this.unconfirmed) if (u.at < horizon) this.unconfirmed.delete(room);
    this.dropLost();
  }

  async close(): Promise<void> {
    this.heartbeat.stop();
    clearInterval(this.sweeper);
    clearInterval(this.reregister);
    const live = [...this.senders.values()];
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

/** One liveness check over the control plane: unreachable means dead, anything else slow. */
export async function pingPeer(engine: TransferEngine, segment: string, type: string, timeoutMs: number): Promise<'alive' | 'dead' | 'missed'> {
  try {
    await engine.controlClient(segment).request(type, { v: PD_PROTOCOL_VERSION }, timeoutMs);
    return 'alive';
  } catch (e) {
    return isTransferError(e, 'PEER_UNREACHABLE') ? 'dead' : 'missed';
  }
}
