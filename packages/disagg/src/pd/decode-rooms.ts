import { TransferError, type BootstrapInfo } from '@te/connector';
import { DecodeReceiver } from './kv-receiver.js';
import type { DecodeRoomContext } from './room-context.js';

/** A heartbeat target of a decode: a prefill instance's bootstrap server, or one prefill rank. */
export type PrefillPeer = `http:${string}` | `seg:${string}`;

/**
 * Every room of one decode rank, keyed by room: one receiver from its creation until it
 * ended, in one of the states of `DecodeReceiver.phase` (resolving → waiting → requested →
 * ended, or failing on the way: its prefill ranks are told to stop before it ends).
 */
export class DecodeRoomTable {
  private readonly rooms = new Map<bigint, DecodeReceiver>();

  constructor(private readonly ctx: DecodeRoomContext) {}

  open(bootstrap: BootstrapInfo): DecodeReceiver {
    if (this.rooms.has(bootstrap.room)) throw new TransferError('INVALID_ARGUMENT', `room ${bootstrap.room} already has a receiver on this rank`);
    const r = new DecodeReceiver(this.ctx, bootstrap);
    this.rooms.set(bootstrap.room, r);
    return r;
  }

  get(room: bigint): DecodeReceiver | undefined {
    return this.rooms.get(room);
  }

  /** A receiver ended (succeeded or failed). */
  ended(r: { readonly room: bigint }): void {
    if (this.rooms.get(r.room) === r) this.rooms.delete(r.room);
  }

  receivers(): DecodeReceiver[] {
    return [...this.rooms.values()];
  }

  /** The peers rooms depend on: their bootstrap servers and prefill ranks, once resolved. */
  livePeers(): Set<PrefillPeer> {
    const out = new Set<PrefillPeer>();
    for (const r of this.rooms.values()) {
      // Before a room resolved its prefill, the bootstrap timeout governs, not heartbeats.
      if (r.phase === 'resolving' || r.phase === 'ended') continue;
      out.add(`http:${r.bootstrapAddress}`);
      for (const s of r.segments) out.add(`seg:${s}`);
    }
    return out;
  }

  /** Fails (telling the prefill ranks) every room that depends on a peer the heartbeat lost. */
  failRoomsOf(peer: PrefillPeer): void {
    const http = peer.startsWith('http:');
    const what = http ? `bootstrap server ${peer.slice(5)}` : `prefill rank ${peer.slice(4)}`;
    for (const r of this.receivers()) {
      const hit = http ? r.bootstrapAddress === peer.slice(5) : r.segments.includes(peer.slice(4));
      if (hit)
        void r.failAndAbort(new TransferError('PEER_FAILED', `room ${r.room}: lost connection with ${what} (heartbeat)`, { details: { room: r.room, peer } }));
    }
  }
}
