import type { SegmentDescriptor } from '../spi/descriptor.js';
import { ControlClient, type ControlServer } from './control-plane.js';
import { checkDescriptor } from './descriptor-check.js';

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

  constructor(server: ControlServer) {
    this.unhandle = server.handle(DESCRIPTOR_REQUEST, () => this.current);
  }

  async publish(descriptor: SegmentDescriptor): Promise<void> {
    this.current = descriptor;
  }

  /** The control client of a peer, shared with every other user of the control plane. */
  client(segment: string): ControlClient {
    let c = this.clients.get(segment);
    if (!c) {
      c = new ControlClient(segment);
      this.clients.set(segment, c);
    }
    return c;
  }

  async fetch(segment: string, timeoutMs: number): Promise<SegmentDescriptor> {
    const body = await this.client(segment).request(DESCRIPTOR_REQUEST, null, timeoutMs);
    return checkDescriptor(body, segment);
  }

  // Clients are kept for the life of the engine: other users (KV bootstrap, EC) may hold
  // them, and zeromq reconnects to a restarted peer by itself.

  async close(): Promise<void> {
    this.unhandle();
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}
