import {
  NATIVE_STATUS,
  OP_WRITE,
  TransferError,
  type BatchResult,
  type Notification,
  type RegisterRequest,
  type SegmentDescriptor,
  type SubmitOptions,
  type TransferBatch,
  type Transport,
  type TransportContext,
  type TransportPeer,
  type TransportRegistration,
  type WireValue,
} from '@te/connector';
import { fakeAddressOf, fakeBytesAt } from './fake-memory.js';
import type { FakeFaults } from './faults.js';

interface FakeRegion {
  addr: bigint;
  length: bigint;
  remoteAccess: boolean;
  bytes: Uint8Array;
}

/** What a cancelled batch says of the peer's memory: with a write in it, that bytes may still land there. */
type CancelDetails = { details?: { remoteMayBeWritten: boolean } };

interface FakePeer extends TransportPeer {
  plugin: string;
}

// Every fake transport of the process, by plugin name and segment: the "network".
const fabric = new Map<string, FakeTransport>();
const key = (plugin: string, segment: string): string => `${plugin}\u0000${segment}`;

/**
 * A test-only transport: moves bytes with memcpy between engines of one process. It
 * validates like a real transport (local and remote ranges, epochs) and applies data when
 * a batch completes, so an aborted or timed-out batch changes nothing, or, with
 * `faults.writeEarly`, when it is submitted, as a real transport's bytes land before its
 * completion (then a timed-out batch has changed memory, and only its status says so).
 */
export class FakeTransport implements Transport {
  private readonly regions: FakeRegion[] = [];
  private readonly listeners = new Set<(n: Notification) => void>();
  private closed = false;

  constructor(
    private readonly plugin: string,
    private readonly context: TransportContext,
    private readonly faults: FakeFaults,
  ) {
    fabric.set(key(plugin, context.segmentName), this);
  }

  endpoint(): WireValue {
    return { fabric: 'in-process', segment: this.context.segmentName };
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.assertOpen();
    // A buffer registered first by another transport arrives with that transport's address:
    // the bytes are the buffer's, the address the engine's (the registration rule).
    const addr = request.addr ?? fakeAddressOf(request.buffer!);
    const bytes = request.buffer
      ? new Uint8Array(
          ArrayBuffer.isView(request.buffer) ? request.buffer.buffer : request.buffer,
          ArrayBuffer.isView(request.buffer) ? request.buffer.byteOffset : 0,
          Number(request.length),
        )
      : fakeBytesAt(addr, request.length);
    if (!bytes)
      throw new TransferError('MEMORY_NOT_REGISTERED', `fake fabric has no memory at 0x${addr.toString(16)} (allocate it with allocFakeDeviceMemory)`, {
        plugin: this.plugin,
      });
    if (this.regions.some((r) => addr < r.addr + r.length && r.addr < addr + request.length))
      throw new TransferError('MEMORY_OVERLAP', `0x${addr.toString(16)} overlaps a registered region`, { plugin: this.plugin });
    this.regions.push({ addr, length: request.length, remoteAccess: request.remoteAccess, bytes });
    return { addr, length: request.length, attrs: { key: BigInt(this.regions.length) } };
  }

  async unregisterMemory(addr: bigint): Promise<void> {
    await this.faults.unregisterStep.pass();
    const i = this.regions.findIndex((r) => r.addr === addr);
    if (i < 0) throw new TransferError('MEMORY_NOT_REGISTERED', `no region starts at 0x${addr.toString(16)}`, { plugin: this.plugin });
    this.regions.splice(i, 1);
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.assertOpen();
    const p: FakePeer = { segment: peer.name, epoch: peer.epoch, plugin: this.plugin };
    return p;
  }

  /** Closing a peer fails the batches still using it, as tearing down a real connection does. */
  async closePeer(peer: TransportPeer): Promise<void> {
    const set = this.inFlight.get(peer as FakePeer);
    if (!set) return;
    this.inFlight.delete(peer as FakePeer);
    for (const fail of set) fail();
  }

  private readonly inFlight = new Map<FakePeer, Set<() => void>>();

  /** Status of [addr, addr+len) against this transport's regions. */
  private locate(addr: bigint, length: bigint, remote: boolean): { status: number; bytes?: Uint8Array } {
    const r = this.regions.find((x) => addr >= x.addr && addr < x.addr + x.length && (!remote || x.remoteAccess));
    if (!r) return { status: NATIVE_STATUS.MEMORY_NOT_REGISTERED };
    if (addr + length > r.addr + r.length) return { status: NATIVE_STATUS.ADDRESS_OUT_OF_RANGE };
    const off = Number(addr - r.addr);
    return { status: NATIVE_STATUS.OK, bytes: r.bytes.subarray(off, off + Number(length)) };
  }

  submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    this.assertOpen();
    const failAt = this.injectedFailures(batch.opcodes.length);
    const batchNo = this.faults.countBatch();
    const complete = this.completion(peer, batch, failAt, options.notify);
    // What a cancel of this batch reports about the peer's memory.
    const cancelDetails: CancelDetails = batch.opcodes.includes(OP_WRITE) ? { details: { remoteMayBeWritten: true } } : {};
    if (this.faults.hang) return this.hangUntilReleased(peer, batch, failAt, options, cancelDetails);
    return this.settleInTime(peer, options, cancelDetails, batchNo, complete);
  }

  /** The requests of a batch of `n` that `faults.failNth` fails (index → status); counts them as submitted. */
  private injectedFailures(n: number): Map<number, number> {
    const failAt = new Map<number, number>();
    for (let i = 0; i < n; i++) {
      this.faults.submitted++;
      if (this.faults.failNth && this.faults.submitted === this.faults.failNth.n) failAt.set(i, this.faults.failNth.status);
    }
    return failAt;
  }

  /**
   * What completing the batch does: apply it then; or, with `faults.writeEarly`, apply it
   * now (the bytes land at submission) and only report it then.
   */
  private completion(peer: TransportPeer, batch: TransferBatch, failAt: Map<number, number>, notify: Uint8Array | undefined): () => BatchResult {
    if (!this.faults.writeEarly || this.faults.hang || this.faults.droppedPeers.has(peer.segment)) return () => this.apply(peer, batch, failAt, notify);
    let early: { result?: BatchResult; error?: unknown };
    try {
      early = { result: this.apply(peer, batch, failAt, undefined) };
    } catch (error) {
      early = { error };
    }
    return () => {
      if (early.error) throw early.error;
      if (notify && early.result!.statuses.every((s) => s === 0))
        fabric.get(key(this.plugin, peer.segment))?.deliver({ from: this.context.segmentName, payload: Uint8Array.from(notify) });
      return early.result!;
    };
  }

  /** `faults.hang`: deadline and abort are ignored; the batch settles only on `faults.releaseHung()`. */
  private hangUntilReleased(
    peer: TransportPeer,
    batch: TransferBatch,
    failAt: Map<number, number>,
    options: SubmitOptions,
    cancelDetails: CancelDetails,
  ): Promise<BatchResult> {
    return new Promise<BatchResult>((resolve, reject) => {
      this.faults.parkHung((unconfirmed) => {
        if (unconfirmed) {
          reject(
            new TransferError('TIMEOUT', `batch given up past its ${options.timeoutMs} ms deadline; the peer did not confirm the cancel`, {
              plugin: this.plugin,
              ...cancelDetails,
            }),
          );
          return;
        }
        try {
          resolve(this.apply(peer, batch, failAt, options.notify));
        } catch (e) {
          reject(e);
        }
      });
    });
  }

  /**
   * Completes the batch after `faults.latencyMs` unless its deadline, its signal, a closed
   * connection or a dropped peer ends it first (or `faults.neverComplete` leaves only those).
   */
  private settleInTime(
    peer: TransportPeer,
    options: SubmitOptions,
    cancelDetails: CancelDetails,
    batchNo: number,
    complete: () => BatchResult,
  ): Promise<BatchResult> {
    return new Promise<BatchResult>((resolve, reject) => {
      const fp = peer as FakePeer;
      let peerSet = this.inFlight.get(fp);
      if (!peerSet) this.inFlight.set(fp, (peerSet = new Set()));
      const onClose = (): void => {
        cleanup();
        reject(new TransferError('CONNECTION_LOST', `the connection to ${peer.segment} was closed under the batch`, { plugin: this.plugin }));
      };
      peerSet.add(onClose);
      // Set later, once the batch is scheduled; cleanup (defined first) clears it if set.
      // eslint-disable-next-line prefer-const -- cleanup reads it before the one assignment
      let timer: NodeJS.Timeout | undefined;
      const cleanup = (): void => {
        peerSet!.delete(onClose);
        clearTimeout(deadline);
        if (timer) clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        stopDrop();
      };
      // Read when the batch is cancelled: a test may set it after the submit.
      const cancelled = () => (this.faults.unconfirmedCancel ? cancelDetails : {});
      const onAbort = (): void => {
        cleanup();
        reject(new TransferError('ABORTED', 'batch aborted', { plugin: this.plugin, ...cancelled() }));
      };
      const deadline = setTimeout(() => {
        cleanup();
        reject(new TransferError('TIMEOUT', `batch did not complete within ${options.timeoutMs} ms`, { plugin: this.plugin, ...cancelled() }));
      }, options.timeoutMs);
      const stopDrop = this.faults.onDrop((segment) => {
        if (segment !== peer.segment) return;
        cleanup();
        reject(new TransferError('PEER_FAILED', `peer ${segment} went away mid-batch`, { plugin: this.plugin }));
      });
      if (options.signal) options.signal.addEventListener('abort', onAbort, { once: true });
      if (this.faults.droppedPeers.has(peer.segment)) {
        cleanup();
        reject(new TransferError('PEER_FAILED', `peer ${peer.segment} is unreachable`, { plugin: this.plugin }));
        return;
      }
      if (this.faults.neverComplete) return;
      const delay = this.faults.latencyMs + (this.faults.outOfOrder && batchNo % 2 === 1 ? 40 : 0);
      timer = setTimeout(() => {
        cleanup();
        try {
          resolve(complete());
        } catch (e) {
          reject(e);
        }
      }, delay);
    });
  }

  private apply(peer: TransportPeer, batch: TransferBatch, failAt: Map<number, number>, notify?: Uint8Array): BatchResult {
    const target = fabric.get(key(this.plugin, peer.segment));
    if (!target) throw new TransferError('PEER_FAILED', `peer ${peer.segment} has no ${this.plugin} transport`, { plugin: this.plugin });
    if (target.context.epoch !== peer.epoch)
      throw new TransferError('STALE_DESCRIPTOR', `peer ${peer.segment} restarted (epoch ${target.context.epoch}, descriptor says ${peer.epoch})`, {
        plugin: this.plugin,
      });
    const statuses = new Int32Array(batch.opcodes.length);
    let bytes = 0n;
    for (let i = 0; i < batch.opcodes.length; i++) {
      const injected = failAt.get(i);
      if (injected !== undefined) {
        statuses[i] = injected;
        continue;
      }
      const len = batch.lengths[i]!;
      const local = this.locate(batch.localAddrs[i]!, len, false);
      const remote = target.locate(batch.remoteAddrs[i]!, len, true);
      statuses[i] = local.status !== 0 ? local.status : remote.status;
      if (statuses[i] !== 0) continue;
      if (batch.opcodes[i] === OP_WRITE) remote.bytes!.set(local.bytes!);
      else local.bytes!.set(remote.bytes!);
      bytes += len;
    }
    if (notify && statuses.every((s) => s === 0)) target.deliver({ from: this.context.segmentName, payload: Uint8Array.from(notify) });
    return { statuses, bytes };
  }

  private deliver(n: Notification): void {
    for (const l of this.listeners) l(n);
  }

  onNotification(listener: (n: Notification) => void): void {
    this.listeners.add(listener);
  }

  describe(): Record<string, WireValue> {
    return { fabric: 'in-process (test only)', regions: this.regions.length };
  }

  private assertOpen(): void {
    if (this.closed) throw new TransferError('ENGINE_CLOSED', 'fake transport is closed', { plugin: this.plugin });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.faults.closeStep.pass();
    fabric.delete(key(this.plugin, this.context.segmentName));
    this.regions.length = 0;
    this.listeners.clear();
  }
}
