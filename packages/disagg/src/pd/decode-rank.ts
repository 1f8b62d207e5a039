import { type BootstrapInfo, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { BootstrapClient } from '../bootstrap/client.js';
import type { RankDirectory } from '../bootstrap/directory.js';
import { checkReply, handleMessage } from '../protocol/handle.js';
import { MSG, PD_PROTOCOL_VERSION, PingSchema, RegisterReplySchema, StatusSchema, SumsSchema, type StatusMessage } from '../protocol/messages.js';
import { describeDecode, type DecodeLayout } from './decode-layout.js';
import { DecodeRoomTable, type PrefillPeer } from './decode-rooms.js';
import { Heartbeat, pingPeer } from './heartbeat.js';
import type { DecodeReceiver } from './kv-receiver.js';
import { tableOf } from './local-buffers.js';
import type { PrefillInfo } from '../bootstrap/schema.js';
import type { HeadSlice } from '../plan/slice-copy.js';
import type { DecodeRoomContext } from './room-context.js';
import { DecodeStaging } from '../staging/decode-staging.js';
import { resolveStaging, type ResolvedStaging } from '../staging/options.js';
import type { PDTimeouts } from './timeouts.js';

const MAX_BOOTSTRAP_CLIENTS = 1024;

/**
 * One decode rank: registers its buffers with each prefill rank it needs (once), owns its
 * rooms (a room table of receivers, each given a room context, never this rank), takes the
 * prefill ranks' results on the control plane, and fails rooms whose prefill stops
 * answering heartbeats.
 */
export class DecodeRank {
  private readonly rooms: DecodeRoomTable;
  private readonly registered = new Map<string, Promise<void>>();
  private readonly clients = new Map<string, RankDirectory>();
  private readonly unhandle: (() => void)[] = [];
  private readonly heartbeat: Heartbeat;
  /** This rank's layout and buffers, described once: what prefill ranks and the bootstrap server receive. */
  private readonly decode: DecodeLayout;
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
    this.decode = describeDecode(engine, layout, buffers);
    this.staging = new DecodeStaging(engine, staging, buffers, layout, tableOf(buffers.kv, 'KV'), (room) => this.rooms.get(room)?.scatterRoom(), log);
    this.rooms = new DecodeRoomTable(this.roomContext());
    this.unhandle.push(
      handleMessage(engine, MSG.status, StatusSchema, (m) => this.onStatus(m)),
      handleMessage(engine, MSG.sums, SumsSchema, (m) => {
        // An unknown room, like a repeated or late chunk, is answered and ignored.
        this.rooms.get(m.room)?.onSums(m);
        return { v: PD_PROTOCOL_VERSION };
      }),
      handleMessage(engine, MSG.decodePing, PingSchema, () => ({ v: PD_PROTOCOL_VERSION })),
    );
    this.heartbeat = new Heartbeat(
      timeouts.heartbeatMs,
      timeouts.heartbeatMaxFailures,
      () => this.rooms.livePeers(),
      (peer, timeoutMs) => this.check(peer as PrefillPeer, timeoutMs),
      (peer) => this.onPrefillLost(peer as PrefillPeer),
    );
    this.heartbeat.start();
  }

  /** What each room is given of this rank (see room-context.ts). */
  private roomContext(): DecodeRoomContext {
    return {
      engine: this.engine,
      timeouts: this.timeouts,
      decode: this.decode,
      staging: this.staging,
      directory: (address) => this.bootstrapClient(address),
      prepareStaging: (info, slices) => this.prepareStaging(info, slices),
      ensureRegistered: (segment, timeoutMs, force) => this.ensureRegistered(segment, timeoutMs, force),
      ended: (r) => this.rooms.ended(r),
    };
  }

  private bootstrapClient(address: string): RankDirectory {
    let c = this.clients.get(address);
    if (!c) {
      if (this.clients.size >= MAX_BOOTSTRAP_CLIENTS) this.clients.delete(this.clients.keys().next().value!);
      c = this.directoryOf(address);
      this.clients.set(address, c);
    }
    return c;
  }

  /** Registers this decode rank's buffers with a prefill rank, once (again with `force`). */
  private ensureRegistered(segment: string, timeoutMs: number, force = false): Promise<void> {
    let p = force ? undefined : this.registered.get(segment);
    if (!p) {
      p = this.engine
        .controlClient(segment)
        .request(MSG.register, this.decode.registration, timeoutMs)
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
  private async prepareStaging(info: PrefillInfo, slices: (HeadSlice | undefined)[]): Promise<void> {
    const wire = await this.staging.prepare(info, slices);
    if (wire && !this.decode.registration.ring) {
      this.decode.registration.ring = wire;
      this.registered.clear();
    }
  }

  createReceiver(bootstrap: BootstrapInfo): DecodeReceiver {
    return this.rooms.open(bootstrap);
  }

  private async onStatus(m: StatusMessage): Promise<{ v: number }> {
    // An unknown room (already finished, failed or never created here) is answered, not an error.
    await this.rooms.get(m.room)?.onStatus(m);
    return { v: PD_PROTOCOL_VERSION };
  }

  private async check(peer: PrefillPeer, timeoutMs: number): Promise<'alive' | 'dead' | 'missed'> {
    if (peer.startsWith('http:')) return (await this.bootstrapClient(peer.slice(5)).health(timeoutMs)) ? 'alive' : 'missed';
    return pingPeer(this.engine, peer.slice(4), MSG.ping, timeoutMs);
  }

  private onPrefillLost(peer: PrefillPeer): void {
    this.rooms.failRoomsOf(peer);
    // Registrations with a lost rank are redone on next contact (it may come back restarted).
    if (peer.startsWith('seg:')) this.registered.delete(peer.slice(4));
    else this.bootstrapClient(peer.slice(5)).forget();
  }

  async close(): Promise<void> {
    this.heartbeat.stop();
    const live = this.rooms.receivers();
    await Promise.allSettled(live.map((r) => r.abort('the KV manager closed')));
    for (const u of this.unhandle) u();
    await this.staging.close();
  }
}
