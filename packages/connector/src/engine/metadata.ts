import type { SegmentDescriptor } from '../spi/descriptor.js';
import { ControlClient } from './control-client.js';
import type { ControlServer } from './control-plane.js';
import { checkDescriptor } from './descriptor-check.js';
import { checkSegmentName } from './segment-name.js';
import { TransferError } from '../errors/transfer-error.js';
import type { ControlKeys } from './control-security.js';

/** Where peers learn each other's segment descriptors. */
export interface MetadataStore {
  /** Makes this process's current descriptor available to peers. */
  publish(descriptor: SegmentDescriptor): Promise<void>;
  /** Fetches a peer's descriptor by segment name. */
  fetch(segment: string, timeoutMs: number, from?: string): Promise<SegmentDescriptor>;
  close(): Promise<void>;
}

export const DESCRIPTOR_REQUEST = 'te.descriptor.get';
/** Owner → every peer that fetched its descriptor: a region was unregistered. */
export const REVOKE_REQUEST = 'te.segment.revoke';
/** Peers remembered as holders of this process's descriptor (the least recent forgotten first). */
const MAX_SUBSCRIBERS = 4096;

/**
 * The embedded default: no service. A segment's name is its control endpoint
 * (`host:port`), and its descriptor is fetched from the peer itself.
 */
export class P2PHandshake implements MetadataStore {
  private current: SegmentDescriptor | undefined;
  private readonly clients = new Map<string, ControlClient>();
  private readonly unhandle: () => void;

  /** Segments that fetched this process's descriptor: they are told when a region goes away. */
  private readonly subscribers = new Set<string>();

  constructor(
    server: ControlServer,
    private readonly keys?: ControlKeys,
    private readonly maxClients = 1024,
    private readonly idleMs = 5 * 60_000,
  ) {
    this.unhandle = server.handle(DESCRIPTOR_REQUEST, (body) => {
      // A fetch names its sender (older peers send nothing): remembered, bounded. The name
      // is later dialled (revocation), so one that is not a segment name (host:port) is
      // refused here rather than kept.
      const from = (body as { from?: unknown } | null)?.from;
      if (from !== undefined && from !== null) {
        if (typeof from !== 'string' || from.length > 300) {
          throw new TransferError(
            'INVALID_ARGUMENT',
            `malformed descriptor request: \`from\` must be the sender's segment name (host:port), got ${typeof from === 'string' ? `${from.length} characters` : typeof from}`,
          );
        }
        try {
          checkSegmentName(from);
        } catch (e) {
          throw new TransferError('INVALID_ARGUMENT', `malformed descriptor request: \`from\`: ${(e as Error).message}`);
        }
        this.subscribers.delete(from);
        this.subscribers.add(from);
        if (this.subscribers.size > MAX_SUBSCRIBERS) this.subscribers.delete(this.subscribers.values().next().value!);
      }
      return this.current;
    });
  }

  /**
   * Tells every peer holding this process's descriptor that the region at `addr` is gone,
   * and waits (at most `timeoutMs`) until each dropped what it cached of this process and
   * finished the batches it had in flight to it. A peer that does not answer is forgotten.
   */
  async revoke(self: { segment: string; epoch: bigint }, addr: bigint, timeoutMs: number): Promise<void> {
    await Promise.all(
      [...this.subscribers].map(async (segment) => {
        try {
          await this.client(segment).request(REVOKE_REQUEST, { segment: self.segment, epoch: self.epoch, addr }, timeoutMs);
        } catch {
          this.subscribers.delete(segment);
        }
      }),
    );
  }

  async publish(descriptor: SegmentDescriptor): Promise<void> {
    this.current = descriptor;
  }

  /** The control client of a peer, shared with every other user of the control plane. */
  client(segment: string): ControlClient {
    checkSegmentName(segment);
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

  async fetch(segment: string, timeoutMs: number, from?: string): Promise<SegmentDescriptor> {
    const body = await this.client(segment).request(DESCRIPTOR_REQUEST, from === undefined ? null : { from }, timeoutMs);
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
