import type { MemoryHandle, TransferEngine } from '@te/connector';

/** A notification as the target saw it, with the bytes it pointed at snapshotted on arrival. */
export interface ReceivedNotification {
  from: string;
  payload: Uint8Array;
  /** When the payload was a `checkPayload`, the bytes at that range when the notification arrived. */
  snapshot?: Uint8Array;
}

/** Target-side memory operations the conformance suite needs; may live in another process. */
export interface TargetMemory {
  /** Registers `length` fresh bytes filled with `fill`; returns the address. */
  alloc(length: number, options?: { fill?: number; remoteAccess?: boolean }): Promise<bigint>;
  read(addr: bigint, length: number): Promise<Uint8Array>;
  write(addr: bigint, data: Uint8Array): Promise<void>;
  /** Unregisters a region made by `alloc`. */
  free(addr: bigint): Promise<void>;
  notifications(): Promise<ReceivedNotification[]>;
}

const CHECK_PREFIX = 'te-check:';

/** A notification payload asking the target to snapshot [addr, addr+length) on arrival. */
export function checkPayload(addr: bigint, length: number): Uint8Array {
  return new TextEncoder().encode(`${CHECK_PREFIX}${addr.toString(16)}:${length}`);
}

/** Target memory held by an engine in this process. */
export class LocalTargetMemory implements TargetMemory {
  private readonly buffers = new Map<bigint, { handle: MemoryHandle; bytes: Uint8Array }>();
  private readonly received: ReceivedNotification[] = [];

  constructor(private readonly engine: TransferEngine) {
    engine.onNotification((n) => {
      const text = new TextDecoder().decode(n.payload);
      const entry: ReceivedNotification = { from: n.from, payload: n.payload };
      if (text.startsWith(CHECK_PREFIX)) {
        const [hex, len] = text.slice(CHECK_PREFIX.length).split(':');
        const snap = this.bytesAt(BigInt(`0x${hex}`), Number(len));
        if (snap) entry.snapshot = Uint8Array.from(snap);
      }
      this.received.push(entry);
    });
  }

  private bytesAt(addr: bigint, length: number): Uint8Array | undefined {
    for (const { handle, bytes } of this.buffers.values()) {
      if (addr >= handle.addr && addr + BigInt(length) <= handle.addr + handle.length) {
        const off = Number(addr - handle.addr);
        return bytes.subarray(off, off + length);
      }
    }
    return undefined;
  }

  async alloc(length: number, options: { fill?: number; remoteAccess?: boolean } = {}): Promise<bigint> {
    // From the engine's allocator, so pool-model transports serve it strictly.
    const handle = await this.engine.allocateMemory(length, { remoteAccess: options.remoteAccess ?? true });
    const bytes = handle.buffer!;
    bytes.fill(options.fill ?? 0);
    this.buffers.set(handle.addr, { handle, bytes });
    return handle.addr;
  }

  async read(addr: bigint, length: number): Promise<Uint8Array> {
    const b = this.bytesAt(addr, length);
    if (!b) throw new Error(`target has no buffer at 0x${addr.toString(16)}`);
    return Uint8Array.from(b);
  }

  async write(addr: bigint, data: Uint8Array): Promise<void> {
    const b = this.bytesAt(addr, data.length);
    if (!b) throw new Error(`target has no buffer at 0x${addr.toString(16)}`);
    b.set(data);
  }

  async free(addr: bigint): Promise<void> {
    const entry = this.buffers.get(addr);
    if (!entry) throw new Error(`target has no buffer at 0x${addr.toString(16)}`);
    await this.engine.freeMemory(entry.handle);
    this.buffers.delete(addr);
  }

  async notifications(): Promise<ReceivedNotification[]> {
    return [...this.received];
  }
}
