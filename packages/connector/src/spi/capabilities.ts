import type { MemoryKind } from './memory.js';
import type { TransportClass } from './descriptor.js';

/** What a transport can do, declared before anything is created. The engine refuses the rest. */
export interface TransportCapabilities {
  /** Locality class used to pick among transports both peers support (a well-known one, or the plugin's own). */
  class: TransportClass;
  /**
   * Where this transport ranks among those both peers support, lower first (0 for
   * intra-nvlink … 5 for test, their places in TRANSPORT_CLASSES). Defaults to the
   * well-known class's place; a class of the plugin's own must declare it.
   */
  locality?: number;
  /** Memory kinds the transport can register locally and reach on peers. */
  memoryKinds: readonly MemoryKind[];
  /** Whether one-sided READ is supported (WRITE always is). */
  read: boolean;
  /** Whether a batch can carry a notification delivered after its data. */
  notifications: boolean;
  /** Requests the transport keeps in flight at once, for callers that size their windows. */
  maxInFlight: number;
  /** Whether raw addresses (not backed by a JS buffer) can be registered. */
  rawAddresses: boolean;
  /**
   * Whether a write can gather its bytes from strided rows of local host memory
   * (`TransferBatch.localRows` / `localPitches`); absent means no, and the engine refuses
   * such a batch before the transport sees it.
   */
  gatherWrites?: boolean;
  /**
   * Whether a write can land its bytes in strided rows of the peer's host memory
   * (`TransferBatch.remoteRows` / `remotePitches`); absent means no, and the engine refuses
   * such a batch before the transport sees it.
   */
  scatterWrites?: boolean;
  /**
   * Whether the transport verifies writes (`TransferBatch.verifyWrites`): a digest of the
   * bytes sent, compared with one of the bytes that landed, before the write is reported
   * done (DATA_CORRUPTED where they differ). Absent means no, and the engine refuses such a
   * batch before the transport sees it.
   */
  verifiedWrites?: boolean;
  /**
   * Whether the transport moves only memory its own allocator handed out (a pre-registered
   * pool). The engine's `allocateMemory` asks such a transport first, so an engine that
   * also holds a transport whose allocator merely speeds things up (mooncake-shm's shared
   * pages) still allocates memory every transport of it can move. Absent means no.
   */
  ownMemoryOnly?: boolean;
}

export function describeCapabilities(c: TransportCapabilities): string {
  const bits = [`class=${c.class}`, `memory=${c.memoryKinds.join('+')}`, c.read ? 'read' : 'write-only'];
  if (c.notifications) bits.push('notifications');
  if (c.rawAddresses) bits.push('raw-addresses');
  if (c.gatherWrites) bits.push('gather-writes');
  if (c.scatterWrites) bits.push('scatter-writes');
  if (c.verifiedWrites) bits.push('verified-writes');
  if (c.ownMemoryOnly) bits.push('own-memory-only');
  bits.push(`inflight=${c.maxInFlight}`);
  return bits.join(' ');
}
