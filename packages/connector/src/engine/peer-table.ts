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
  /** Batches using this peer's connections now. */
  inFlight: number;
  /** Forgotten while batches were in flight: its connections close when the last one settles. */
  closeWhenIdle?: boolean;
  /** Called when the last batch in flight settles. */
  onIdle?: (() => void)[];
}

export class PeerTable {
  private readonly peers = new Map<string, Promise<PeerState>>();

  constructor(
    private readonly held: EngineTransport[],
    /** Looks a descriptor up (from the peer, from etcd, or this process's own). */
    private readonly lookup: (segment: string) => Promise<SegmentDescriptor>,
  ) {}

  /** The peer's state, looked up once; a failed lookup is not kept. */
  state(segment: string): Promise<PeerState> {
    let state = this.peers.get(segment);
    if (!state) {
      state = (async () => {
        const descriptor = await this.lookup(segment);
        return { descriptor, routing: peerRouting(descriptor), opened: new Map(), inFlight: 0 } as PeerState;
      })();
      this.peers.set(segment, state);
      state.catch(() => {
        if (this.peers.get(segment) === state) this.peers.delete(segment);
      });
    }
    return state;
  }

  /** The state if the peer was looked up (or is being), without starting a lookup. */
  known(segment: string): Promise<PeerState> | undefined {
    return this.peers.get(segment);
  }

  segments(): string[] {
    return [...this.peers.keys()];
  }

  /** The transport peer over `via`, opened once per state; a failed open is not kept. */
  open(state: PeerState, via: EngineTransport): Promise<TransportPeer> {
    let p = state.opened.get(via.name);
    if (!p) {
      p = via.transport.openPeer(state.descriptor);
      state.opened.set(via.name, p);
      p.catch(() => state.opened.delete(via.name));
    }
    return p;
  }

  /** A batch starts using the peer's connections. */
  acquire(state: PeerState): void {
    state.inFlight++;
  }

  /** A batch settled: the last one out closes the connections of a forgotten peer. */
  release(state: PeerState): void {
    state.inFlight--;
    if (state.inFlight !== 0) return;
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
    const state = this.peers.get(segment);
    this.peers.delete(segment);
    if (!state) return;
    const s = await state.catch(() => undefined);
    if (!s) return;
    if (s.inFlight > 0) {
      s.closeWhenIdle = true;
      return;
    }
    await this.closeTransportPeers(s);
  }

  private async closeTransportPeers(s: PeerState): Promise<void> {
    const opened = [...s.opened];
    s.opened.clear();
    await Promise.allSettled(
      opened.map(async ([name, p]) => {
        const peer = await p;
        await this.held.find((t) => t.name === name)?.transport.closePeer(peer);
      }),
    );
  }
}
