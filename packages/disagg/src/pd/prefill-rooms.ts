import { TransferError } from '@te/connector';
import type { PrefillSender } from './kv-sender.js';
import type { EndedPrefillRoom, RoomRequest } from './room-context.js';

// A decode may be ahead of the prefill, and a room that ended is remembered a while for a late
// message: at most this many rooms in each remembered state, so a hostile peer cannot grow memory.
const MAX_ROOMS_PER_STATE = 65_536;
const MAX_REQUESTS_PER_ROOM = 4_096;

/** A room on a prefill rank, in the one state it is in. */
export type PrefillRoom =
  /** Decode ranks asked for it before its sender was created: their requests wait here. */
  | { state: 'waiting'; requests: RoomRequest[]; at: number }
  /** Its sender exists and has not ended. */
  | { state: 'live'; sender: PrefillSender }
  /** It can no longer succeed here (a decode aborted or was refused before the sender existed): the sender fails when created. */
  | { state: 'refused'; error: TransferError; at: number }
  /** Its sender ended with a write that may still land in these decodes' pages (answered to a late abort). */
  | { state: 'finished'; segments: ReadonlySet<string>; at: number };

type State = PrefillRoom['state'];

/**
 * Every room of one prefill rank, keyed by room, each in one explicit state. A room moves
 * waiting → live (its sender is created), waiting → refused (a decode aborted or was
 * refused first), refused → gone (its sender is created and fails at once), live → gone or
 * finished (its sender ended). Remembered states older than the bootstrap timeout are swept.
 */
export class PrefillRoomTable {
  private readonly rooms = new Map<bigint, PrefillRoom>();
  private readonly counts: Record<State, number> = { waiting: 0, live: 0, refused: 0, finished: 0 };

  get(room: bigint): PrefillRoom | undefined {
    return this.rooms.get(room);
  }

  /** The room's sender while it is live. */
  sender(room: bigint): PrefillSender | undefined {
    const r = this.rooms.get(room);
    return r?.state === 'live' ? r.sender : undefined;
  }

  /** Every live sender. */
  senders(): PrefillSender[] {
    const out: PrefillSender[] = [];
    for (const r of this.rooms.values()) if (r.state === 'live') out.push(r.sender);
    return out;
  }

  /** Every request waiting for its sender. */
  *waitingRequests(): Iterable<RoomRequest> {
    for (const r of this.rooms.values()) if (r.state === 'waiting') yield* r.requests;
  }

  /**
   * The room's sender is created (`create`): it takes the requests that waited for it, or
   * fails at once with the reason the room was refused.
   */
  open(room: bigint, create: () => PrefillSender): PrefillSender {
    const entry = this.rooms.get(room);
    if (entry?.state === 'live') throw new TransferError('INVALID_ARGUMENT', `room ${room} already has a sender on this rank`);
    const sender = create();
    if (entry?.state === 'refused') {
      this.delete(room);
      sender.fail(entry.error);
      return sender;
    }
    this.set(room, { state: 'live', sender });
    for (const rr of entry?.state === 'waiting' ? entry.requests : []) {
      try {
        sender.addRequest(rr);
      } catch {
        // the sender is failed and reports it
      }
    }
    return sender;
  }

  /** A decode rank's request: to the room's sender, or kept until the sender is created. */
  request(room: bigint, rr: RoomRequest): void {
    const entry = this.rooms.get(room);
    if (entry?.state === 'refused') throw entry.error;
    if (entry?.state === 'live') return entry.sender.addRequest(rr);
    if (entry?.state === 'waiting') {
      if (entry.requests.length >= MAX_REQUESTS_PER_ROOM) throw new TransferError('INVALID_ARGUMENT', `room ${room}: too many requests`);
      entry.requests.push(rr);
      return;
    }
    if (this.counts.waiting >= MAX_ROOMS_PER_STATE)
      throw new TransferError('POOL_EXHAUSTED', `${MAX_ROOMS_PER_STATE} rooms already wait for their prefill; retry later`);
    this.set(room, { state: 'waiting', requests: [rr], at: Date.now() });
  }

  /** The error a room was refused with, while its sender does not exist yet. */
  refusal(room: bigint): TransferError | undefined {
    const entry = this.rooms.get(room);
    return entry?.state === 'refused' ? entry.error : undefined;
  }

  /** Fails a room now (its sender), or when its sender is created. */
  refuse(room: bigint, error: TransferError): void {
    const entry = this.rooms.get(room);
    if (entry?.state === 'live') return entry.sender.fail(error);
    if (this.counts.refused < MAX_ROOMS_PER_STATE) this.set(room, { state: 'refused', error, at: Date.now() });
    else if (entry?.state === 'waiting') this.delete(room);
  }

  /** A sender ended: the room is gone, or finished while a write of it may still land. */
  ended(sender: EndedPrefillRoom): void {
    const entry = this.rooms.get(sender.room);
    if (entry?.state === 'live' && entry.sender !== sender) return;
    if (entry?.state === 'live') this.delete(sender.room);
    const segments = sender.pagesMayBeWritten();
    if (segments.size > 0 && this.counts.finished < MAX_ROOMS_PER_STATE) this.set(sender.room, { state: 'finished', segments, at: Date.now() });
  }

  /** Forgets the rooms remembered since before `horizon` (live rooms end by their own timeouts). */
  sweep(horizon: number): void {
    for (const [room, r] of this.rooms) if (r.state !== 'live' && r.at < horizon) this.delete(room);
  }

  private set(room: bigint, entry: PrefillRoom): void {
    this.delete(room);
    this.rooms.set(room, entry);
    this.counts[entry.state]++;
  }

  private delete(room: bigint): void {
    const old = this.rooms.get(room);
    if (!old) return;
    this.rooms.delete(room);
    this.counts[old.state]--;
  }
}
