import { KVStatus, TransferError, type BootstrapInfo, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { BootstrapClient } from '../bootstrap/client.js';
import type { RankDirectory } from '../bootstrap/directory.js';
import { checkReply, handleMessage } from '../protocol/handle.js';
import { MSG, PD_PROTOCOL_VERSION, PingSchema, RegisterReplySchema, StatusSchema, type RegisterMessage, type StatusMessage } from '../protocol/messages.js';
import { Heartbeat } from './heartbeat.js';
import { DecodeReceiver } from './kv-receiver.js';
import { tableOf, wireOf } from './local-buffers.js';
import type { PrefillInfo } from '../bootstrap/schema.js';
import type { HeadSlice } from '../plan/slice-copy.js';
import { DecodeStaging } from '../staging/decode-staging.js';
import { resolveStaging, type ResolvedStaging } from '../staging/options.js';
import { pingPeer } from './prefill-rank.js';
import type { PDTimeouts } from './timeouts.js';

const MAX_BOOTSTRAP_CLIENTS = 1024;

/**
 * One decode rank: registers its buffers with each prefill rank it needs (once), owns
 * the receivers of its rooms, takes the prefill ranks' results on the control plane, and
 * fails rooms whose prefill stops answering heartbeats.
 */
export class DecodeRank {
  private readonly receivers = new Map<bigint, DecodeReceiver>();
  private readonly registered = new Map<string, Promise<void>>();
  private readonly clients = new Map<string, RankDirectory>();
  private readonly unhandle: (() => void)[] = [];
  private readonly heartbeat: Heartbeat;
  private readonly registerMessage: RegisterMessage;
  /** The staging ring prefill ranks write interleaved head slices into (made on first need). */
  readonly staging: DecodeStaging;

  constructor(
    readonly engine: TransferEngine,
    readonly layout: ParallelLayout,
    readonly buffers: KVBuffers,
    readonly timeouts: PDTimeouts,
    private readonly directoryOf: (address: string) => RankDirectory = (address) => new BootstrapClient(address),
    staging: ResolvedStaging = resolveStaging(),
    log: (message: string) => void = () => undefined,
  ) {
    const b = buffers;
    this.staging = new DecodeStaging(engine, staging, buffers, layout, tableOf(buffers.kv, 'KV'), (room) => this.receivers.get(room)?.scatterRoom(), log);
    this.registerMessage = {
      v: PD_PROTOCOL_VERSION,
      decodeSegment: engine.segmentName,
      epoch: engine.epoch,
      tpSize: layout.attnTpSize,
      tpRank: layout.attnTpRank,
      ppSize: layout.ppSize,
      ppRank: layout.ppRank,
      attention: b.attention,
      pageSize: b.pageSize,
      kvCacheDtype: b.kvCacheDtype,
      firstLayer: b.firstLayer ?? 0,
      numLayers: b.numLayers,
      totalLayers: b.totalLayers ?? b.numLayers,
      kv: wireOf(b.kv),
      aux: wireOf(b.aux),
    };
    if (b.kvHeadsPerRank !== undefined) this.registerMessage.kvHeadsPerRank = b.kvHeadsPerRank;
    if (b.totalKvHeads !== undefined) this.registerMessage.totalKvHeads = b.totalKvHeads;
    if (b.pageLayout !== undefined) this.registerMessage.pageLayout = b.pageLayout;
    if (b.state) {
      this.registerMessage.state = { kind: b.state.kind, table: wireOf(b.state) };
      if (b.state.totalUnits !== undefined) this.registerMessage.state.totalUnits = b.state.totalUnits;
    }
    this.unhandle.push(
      handleMessage(engine, MSG.status, StatusSchema, (m) => this.onStatus(m)),
      handleMessage(engine, MSG.decodePing, PingSchema, () => ({ v: PD_PROTOCOL_VERSION })),
    );
    this.heartbeat = new Heartbeat(
      timeouts.heartbeatMs,
      timeouts.heartbeatMaxFailures,
      () => this.livePeers(),
      (peer, timeoutMs) => this.check(peer, timeoutMs),
      (peer) => this.onPrefillLost(peer),
    );
    this.heartbeat.start();
  }

  /** What the bootstrap server compares with the prefill layout (refusing a mismatch). */
  selfDescription(): { page_size: number; kv_cache_dtype: string; attention: string; num_layers: number } {
    const b = this.buffers;
    return { page_size: b.pageSize, kv_cache_dtype: b.kvCacheDtype, attention: b.attention, num_layers: b.totalLayers ?? b.numLayers };
  }

  bootstrapClient(address: string): RankDirectory {
    let c = this.clients.get(address);
    if (!c) {
      if (this.clients.size >= MAX_BOOTSTRAP_CLIENTS) this.clients.delete(this.clients.keys().next().value!);
      c = this.directoryOf(address);
      this.clients.set(address, c);
    }
    return c;
  }

  /** Registers this decode rank's buffers with a prefill rank, once (again with `force`). */
  ensureRegistered(segment: string, timeoutMs: number, force = false): Promise<void> {
    let p = force ? undefined : this.registered.get(segment);
    if (!p) {
      p = this.engine
        .controlClient(segment)
        .request(MSG.register, this.registerMessage, timeoutMs)
        .then((reply) => void checkReply(MSG.register, RegisterReplySchema, reply));
      this.registered.set(segment, p);
      p.catch(() => {
        if (this.registered.get(segment) === p) this.registered.delete(segment);
      });
    }
    return p;
  }

  /**
   * Before registering with a prefill's ranks: makes the staging ring when their slices
   * need one here. Registrations made before the ring existed are redone, so every prefill
   * rank learns of it.
   */
  async prepareStaging(info: PrefillInfo, slices: (HeadSlice | undefined)[]): Promise<void> {
    const wire = await this.staging.prepare(info, slices);
    if (wire && !this.registerMessage.ring) {
      this.registerMessage.ring = wire;
      this.registered.clear();
    }
  }

  createReceiver(bootstrap: BootstrapInfo): DecodeReceiver {
    if (this.receivers.has(bootstrap.room)) throw new TransferError('INVALID_ARGUMENT', `room ${bootstrap.room} already has a receiver on this rank`);
    const r = new DecodeReceiver(this, bootstrap);
    this.receivers.set(bootstrap.room, r);
    return r;
  }

  forget(r: DecodeReceiver): void {
    if (this.receivers.get(r.room) === r) this.receivers.delete(r.room);
  }

  private onStatus(m: StatusMessage): { v: number } {
    // An unknown room (already finished, failed or never created here) is answered, not an error.
    this.receivers.get(m.room)?.onStatus(m);
    return { v: PD_PROTOCOL_VERSION };
  }

  private livePeers(): Set<string> {
    const out = new Set<string>();
    for (const r of this.receivers.values()) {
      // Before a room resolved its prefill, the bootstrap timeout governs, not heartbeats.
      if (r.status < KVStatus.WaitingForInput) continue;
      out.add(`http:${r.bootstrapAddress}`);
      for (const s of r.segments) out.add(`seg:${s}`);
    }
    return out;
  }

  private async check(peer: string, timeoutMs: number): Promise<'alive' | 'dead' | 'missed'> {
    if (peer.startsWith('http:')) return (await this.bootstrapClient(peer.slice(5)).health(timeoutMs)) ? 'alive' : 'missed';
    return pingPeer(this.engine, peer.slice(4), MSG.ping, timeoutMs);
  }

  private onPrefillLost(peer: string): void {
    const what = peer.startsWith('http:') ? `bootstrap server ${peer.slice(5)}` : `prefill rank ${peer.slice(4)}`;
    for (const r of [...this.receivers.values()]) {
      const hit = peer.startsWith('http:') ? r.bootstrapAddress === peer.slice(5) : r.segments.includes(peer.slice(4));
      if (hit) r.failAndAbort(new TransferError('PEER_FAILED', `room ${r.room}: lost connection with ${what} (heartbeat)`, { details: { room: r.room, peer } }));
    }
    // Registrations with a lost rank are redone on next contact (it may come back restarted).
    if (peer.startsWith('seg:')) this.registered.delete(peer.slice(4));
    else this.bootstrapClient(peer.slice(5)).forget();
  }

  async close(): Promise<void> {
    this.heartbeat.stop();
    const live = [...this.receivers.values()];
    await Promise.allSettled(live.map((r) => r.abort('the KV manager closed')));
    for (const u of this.unhandle) u();
    await this.staging.close();
  }
}
