import type { BatchResult, Notification, SubmitOptions, TransferBatch } from './batch.js';
import type { SegmentDescriptor } from './descriptor.js';
import type { AllocatedMemory, DeviceName, RegisterRequest, TransportRegistration, WireValue } from './memory.js';

/** Opaque per-peer state a transport keeps (connections, imported handles, address vectors). */
export interface TransportPeer {
  readonly segment: string;
  readonly epoch: bigint;
}

/** What the engine gives a transport when it creates it. */
export interface TransportContext {
  /** This process's segment name (what peers call it). */
  segmentName: string;
  /** Changes at every process start; peers use it to detect stale descriptors. */
  epoch: bigint;
  /** The host address to advertise and bind data listeners to. */
  bindAddress: string;
  /** Default deadline for connecting to a peer (config `timeouts.connectMs`). */
  connectTimeoutMs: number;
  env: NodeJS.ProcessEnv;
  log: (level: 'debug' | 'info' | 'warn' | 'error', message: string) => void;
  /**
   * The deployment's shared secret (config `secret`, TE_SECRET), when set: a transport that
   * can authenticate its connections must do so with it, and refuse peers that cannot.
   */
  secret?: string;
}

/**
 * A created transport. Every method may reject with a `TransferError`; none may throw
 * anything else. The engine validates arguments before calling, the transport still
 * validates what it executes (it is the last line before memory is touched).
 */
export interface Transport {
  /** This transport's endpoint, published to peers in the segment descriptor. */
  endpoint(): WireValue;
  /** Registers memory; the transport keeps `buffer` alive until `unregisterMemory`. */
  registerMemory(request: RegisterRequest): Promise<TransportRegistration>;
  /**
   * Optional allocator, for transports whose peers may only reach memory the transport
   * handed out (one pre-registered pool; GPU memory exportable over a fabric). The engine's
   * `allocateMemory` uses it and registers the result. Fails with POOL_EXHAUSTED when full.
   */
  allocateMemory?(length: bigint, device: DeviceName): Promise<AllocatedMemory>;
  /** Returns memory from `allocateMemory` (the engine unregisters it first). */
  freeMemory?(addr: bigint): Promise<void>;
  /** Unregisters by start address; afterwards peers' requests to it fail with MEMORY_NOT_REGISTERED. */
  unregisterMemory(addr: bigint): Promise<void>;
  /**
   * Prepares to reach a peer (connections, key imports). Called again whenever the engine
   * dropped the peer: a changed epoch, a connection-level failure, a refresh, or a failed open.
   */
  openPeer(peer: SegmentDescriptor): Promise<TransportPeer>;
  /**
   * Optional: whether this transport can reach `peer` at all (a same-host transport: the
   * peer runs on this machine). The router leaves a transport that answers false out of
   * the peer's candidates, so the next shared transport carries the traffic. Absent: yes.
   */
  reaches?(peer: SegmentDescriptor): boolean;
  /**
   * Optional, for transports that talk to another engine's processes (which do not serve
   * te's control plane): the descriptor of `segment` fetched over the transport's own
   * metadata protocol, or undefined when `segment` is not such a peer. With p2p metadata the
   * engine asks these transports before its control plane; an answer must be quick for a te
   * peer (no waiting out `timeoutMs` on it).
   */
  lookupSegment?(segment: string, timeoutMs: number): Promise<SegmentDescriptor | undefined>;
  /** Releases what `openPeer` created. */
  closePeer(peer: TransportPeer): Promise<void>;
  /**
   * Runs a batch. Resolves once every request reached a terminal status (per-request
   * statuses in the result); rejects with TIMEOUT or ABORTED when the deadline passes or
   * the signal fires, and with a connection-level code (CONNECTION_LOST, PEER_FAILED,
   * PEER_UNREACHABLE, STALE_DESCRIPTOR, AUTH_FAILED, PROTOCOL_MISMATCH, BAD_FRAME) when the
   * peer cannot be used; such a rejection may carry per-request `statuses`.
   *
   * Settled means done with memory, on both sides: once the promise settles, no byte of
   * the batch is read from or written to this process's memory, and none lands in the
   * peer's memory any more. A transport that cannot recall work already handed to the
   * network (posted RMA, bytes in a socket buffer) settles only when that work is reported
   * finished or can no longer complete (its connection or endpoint torn down), and says
   * which in the rejection's message. Until then the engine answers the caller at the
   * deadline plus a grace period with TIMEOUT and `details.settled: false`, and keeps the
   * batch's local memory in use (unregistering it is refused with MEMORY_IN_USE, as while
   * the batch is in flight).
   * The one exception a transport may make, and must then declare: when it settles a
   * write whose bytes it already sent without knowing that the peer discarded them (the
   * peer did not confirm a cancel in time), it rejects with `details.remoteMayBeWritten:
   * true`. The engine keeps that on the error it throws, and protocols tell the peer whose
   * memory it concerns (see `untilSettled`).
   * A batch may be empty when `notify` is set (a notification alone).
   */
  submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult>;
  /** Called for each notification a peer sent; required when `notifications` is declared. */
  onNotification?(listener: (notification: Notification) => void): void;
  /** Hardware or provider facts for `te doctor`. */
  describe?(): Record<string, WireValue>;
  /** Closes connections and listeners and unregisters everything. Idempotent. */
  close(): Promise<void>;
}
