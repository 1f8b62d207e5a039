import type { SegmentDescriptor } from '../spi/descriptor.js';
import { ControlClient, type ControlServer } from './control-plane.js';
import { checkDescriptor } from './descriptor-check.js';
import type { ControlKeys } from './control-security.js';

/** Where peers learn each other's segment descriptors. */
export interface MetadataStore {
  /** Makes this process's current descriptor available to peers. */
  publish(descriptor: SegmentDescriptor): Promise<void>;
  /** Fetches a peer's descriptor by segment name. */
  fetch(segment: string, timeoutMs: number): Promise<SegmentDescriptor>;
  close(): Promise<void>;
}

export const DESCRIPTOR_REQUEST = 'te.descriptor.get';

/**
 * The embedded default: no service. A segment's name is its control endpoint
 * (`host:port`), and its descriptor is fetched from the peer itself.
 */
export class P2PHandshake implements MetadataStore {
  private current: SegmentDescriptor | undefined;
  private readonly clients = new Map<string, ControlClient>();
  private readonly unhandle: () => void;

  constructor(
    server: ControlServer,
    private readonly keys?: ControlKeys,
    private readonly maxClients = 1024,
    private readonly idleMs = 5 * 60_000,
  ) {
    this.unhandle = server.handle(DESCRIPTOR_REQUEST, () => this.current);
  }

  async publish(descriptor: SegmentDescriptor): Promise<void> {
    this.current = descriptor;
  }

  /** The control client of a peer, shared with every other user of the control plane. */
  client(segment: string): ControlClient {
    let c = this.clients.get(segment);
    if (c) {
      // Most recently used last: the Map's order is the eviction order.
      this.clients.delete(segment);
      this.clients.set(segment, c);
      return c;
    }
    this.evictIdle();
    c = new ControlClient(segment, this.keys);
    this.clients.set(segment, c);
    return c;
  }

  /** Peers whose control client is open now. */
  get size(): number {
    return this.clients.size;
  }

  /**
   * Bounds the clients: ones idle longer than `idleMs` are closed, and past `maxClients`
   * the least recently used idle ones too. A closed client is recreated on next use; a
   * busy one (requests waiting) is never closed.
   */
  private evictIdle(): void {
    const now = Date.now();
    for (const [segment, c] of this.clients) {
      if (this.clients.size < this.maxClients && now - c.lastUsedAt < this.idleMs) break;
      if (c.busy) continue;
      if (this.clients.size >= this.maxClients || now - c.lastUsedAt >= this.idleMs) {
        c.close();
        this.clients.delete(segment);
      }
    }
  }

  async fetch(segment: string, timeoutMs: number): Promise<SegmentDescriptor> {
    const body = await this.client(segment).request(DESCRIPTOR_REQUEST, null, timeoutMs);
    return checkDescriptor(body, segment);
  }

  // Users of the control plane take a client for each exchange (engine.controlClient), so
  // closing an idle one is invisible to them; zeromq reconnects to a restarted peer itself.

  async close(): Promise<void> {
    this.unhandle();
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}
