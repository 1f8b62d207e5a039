// What the engine holds per peer segment: its descriptor, the transports both sides share,
// and the transport peers opened to it. A peer in use by batches keeps its connections
// until the last one settles, even when it is forgotten meanwhile (only what failed fails).
import type { SegmentDescriptor } from '../spi/descriptor.js';
import type { TransportPeer } from '../spi/transport.js';
import { peerRouting, type EngineTransport, type PeerRouting } from './router.js';

export interface PeerState {
  descriptor: SegmentDescriptor;
  routing: PeerRouting;
  /** Transports both sides hold, best first (fixed for a descriptor; computed on first transfer). */
  candidates?: EngineTransport[];
  opened: Map<string, Promise<TransportPeer>>;
  /** The peers of `opened` whose open succeeded, by transport: a batch takes them without waiting. */
  ready: Map<string, TransportPeer>;
  /** Batches using this peer's connections now. */
  inFlight: number;
  /** Forgotten while batches were in flight: its connections close when the last one settles. */
  closeWhenIdle?: boolean;
  /** Called when the last batch in flight settles. */
  onIdle?: (() => void)[];
}

/** Peers kept at most (the least recently used idle ones are forgotten first), as the control clients. */
export const MAX_PEERS = 1024;
/** A peer unused this long is forgotten (its connections closed) when the table next changes. */
export const PEER_IDLE_MS = 5 * 60_000;

interface Entry {
  segment: string;
  state: Promise<PeerState>;
  /** Set once the lookup succeeded (a pending lookup is never evicted). */
  settled?: PeerState;
  lastUsedAt: number;
}

export class PeerTable {
  /** By segment; the Map's order is the eviction order (most recently used last). */
  private readonly peers = new Map<string, Entry>();
  /** The table entry a looked-up state came from. */
  private readonly entries = new WeakMap<PeerState, Entry>();
  /** The entry last put at the end of `peers` (the most recently used, while it is in the table). */
  private newest: Entry | undefined;

  constructor(
    private readonly held: EngineTransport[],
    /** Looks a descriptor up (from the peer, from etcd, or this process's own). */
    private readonly lookup: (segment: string) => Promise<SegmentDescriptor>,
    private readonly maxPeers = MAX_PEERS,
    private readonly idleMs = PEER_IDLE_MS,
  ) {}

  /**
   * The peer's state if its lookup already succeeded (and it was not forgotten since), without
   * a promise: the common case of a batch to a known peer takes no asynchronous step here.
   */
  lookedUp(segment: string): PeerState | undefined {
    const entry = this.peers.get(segment);
    if (!entry?.settled) return undefined;
    this.touch(segment, entry);
    return entry.settled;
  }

  /** The peer's state, looked up once; a failed lookup is not kept. */
  state(segment: string): Promise<PeerState> {
    const entry = this.peers.get(segment);
    if (entry) {
      this.touch(segment, entry);
      return entry.state;
    }
    this.evictIdle();
    const state = (async () => {
      const descriptor = await this.lookup(segment);
      return { descriptor, routing: peerRouting(descriptor), opened: new Map(), ready: new Map(), inFlight: 0 } as PeerState;
    })();
    const created: Entry = { segment, state, lastUsedAt: Date.now() };
    this.peers.set(segment, created);
    this.newest = created;
    state.then(
      (s) => {
        created.settled = s;
        this.entries.set(s, created);
        // Forgotten (or evicted) while being looked up: nothing may open connections to it unnoticed.
        if (this.peers.get(segment) !== created) s.closeWhenIdle = true;
      },
      () => {
        if (this.peers.get(segment) === created) this.remove(segment);
      },
    );
    return state;
  }

  /** Peers in the table now (looked up or being looked up). */
  get size(): number {
    return this.peers.size;
  }

  private touch(segment: string, entry: Entry): void {
    entry.lastUsedAt = Date.now();
    // Already last (every batch to one peer touches it twice): moving it again would make V8
    // shrink and regrow the Map's table each time.
    if (this.newest === entry) return;
    this.peers.delete(segment);
    this.peers.set(segment, entry);
    this.newest = entry;
  }

  /** Takes the segment's entry out of the table (and out of `newest`, which must not keep it alive). */
  private remove(segment: string): void {
    if (this.newest?.segment === segment) this.newest = undefined;
    this.peers.delete(segment);
  }

  /**
   * Bounds the table like the control clients: peers unused longer than `idleMs` are
   * forgotten, and past `maxPeers` the least recently used idle ones too. A peer being
   * looked up or with batches in flight is never evicted. An evicted peer's transport
   * connections are closed; it is looked up again on next use.
   */
  private evictIdle(): void {
    const now = Date.now();
    for (const [segment, entry] of this.peers) {
      const over = this.peers.size >= this.maxPeers;
      const idle = now - entry.lastUsedAt >= this.idleMs;
      if (!over && !idle) break;
      const s = entry.settled;
      if (!s || s.inFlight > 0) continue;
      this.remove(segment);
      this.drop(s);
    }
  }

  /**
   * A state out of the table: its connections close now, or when its batches in flight
   * settled. It stays marked, so connections a late user opens on it close when that user
   * releases it.
   */
  private drop(s: PeerState): Promise<void> {
    s.closeWhenIdle = true;
    return s.inFlight > 0 ? Promise.resolve() : this.closeTransportPeers(s);
  }

  /** The state if the peer was looked up (or is being), without starting a lookup. */
  known(segment: string): Promise<PeerState> | undefined {
    return this.peers.get(segment)?.state;
  }

  segments(): string[] {
    return [...this.peers.keys()];
  }

  /** The transport peer over `via`, opened once per state; a failed open is not kept. */
  open(state: PeerState, via: EngineTransport): Promise<TransportPeer> {
    let p = state.opened.get(via.name);
    if (!p) {
      p = via.transport.openPeer(state.descriptor);
      const opening = p;
      state.opened.set(via.name, opening);
      opening.then(
        (peer) => {
          if (state.opened.get(via.name) === opening) state.ready.set(via.name, peer);
        },
        () => {
          if (state.opened.get(via.name) === opening) state.opened.delete(via.name);
        },
      );
    }
    return p;
  }

  /** The transport peer over `via` if its open already succeeded (else `open` waits for it). */
  openedPeer(state: PeerState, via: EngineTransport): TransportPeer | undefined {
    return state.ready.get(via.name);
  }

  /** A batch starts using the peer's connections. */
  acquire(state: PeerState): void {
    state.inFlight++;
  }

  /** A batch settled: the last one out closes the connections of a forgotten peer. */
  release(state: PeerState): void {
    state.inFlight--;
    if (state.inFlight !== 0) return;
    // The idle clock starts when the last batch settles.
    const entry = this.entries.get(state);
    if (entry && this.peers.get(entry.segment) === entry) this.touch(entry.segment, entry);
    if (state.closeWhenIdle) void this.closeTransportPeers(state);
    for (const f of state.onIdle?.splice(0) ?? []) f();
  }

  /** Resolves once no batch uses the peer's connections. */
  idle(state: PeerState): Promise<void> {
    if (state.inFlight === 0) return Promise.resolve();
    return new Promise<void>((resolve) => (state.onIdle ??= []).push(resolve));
  }

  /** Drops the peer; its connections close now, or when its batches in flight settled. */
  async forget(segment: string): Promise<void> {
    const entry = this.peers.get(segment);
    this.remove(segment);
    if (!entry) return;
    const s = await entry.state.catch(() => undefined);
    if (!s) return;
    await this.drop(s);
  }

  private async closeTransportPeers(s: PeerState): Promise<void> {
    const opened = [...s.opened];
    s.opened.clear();
    s.ready.clear();
    await Promise.allSettled(
      opened.map(async ([name, p]) => {
        const peer = await p;
        await this.held.find((t) => t.name === name)?.transport.closePeer(peer);
      }),
    );
  }
}
