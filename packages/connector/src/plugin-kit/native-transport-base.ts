import { NATIVE_STATUS, type TransferErrorCode } from '../errors/codes.js';
import { TransferError } from '../errors/transfer-error.js';
import { OP_WRITE, type BatchResult, type Notification, type SubmitOptions, type TransferBatch } from '../spi/batch.js';
import type { SegmentDescriptor } from '../spi/descriptor.js';
import type { RegisterRequest, TransportRegistration, WireValue } from '../spi/memory.js';
import type { Transport, TransportContext, TransportPeer } from '../spi/transport.js';
import { BatchTracker } from './batch-tracker.js';
import { checkSubmit } from './check-submit.js';
import { keepAttached } from '../spi/keep-attached.js';

/**
 * The callbacks a native transport's constructor takes (`new X(options, callbacks)`), called
 * on the JS thread, never from native threads. The addon glue (te/napi/native_transport.h)
 * requires onBatch and calls the others only where the transport has such events.
 */
export interface NativeCallbacks {
  /**
   * A batch is terminal. `batchStatus` is 0, the cancel status (TIMEOUT/ABORTED) or a
   * batch-level failure; `statuses` has one status per request; `bytes` counts the bytes of
   * OK requests; `message` describes the first failure. `remoteMayBeWritten`: a WRITE
   * settled while bytes it had sent may still land at the peer.
   */
  onBatch(batchId: number, batchStatus: number, statuses: Int32Array, bytes: bigint, message: string, remoteMayBeWritten?: boolean): void;
  /** openPeer finished (status 0) or failed. */
  onOpen(peerId: number, status: number, message: string): void;
  /** A peer's notification arrived (after all its batch's bytes landed here). */
  onNotify(from: string, payload: Uint8Array): void;
  /** A rare warning from native code, for the engine's log. */
  onLog(level: 'warn', message: string): void;
  /** A peer check finished: `report` is JSON. */
  onCheck(checkId: number, status: number, report: string): void;
}

/** What NativeTransportBase calls on the native object; each addon's binding declares the rest. */
export interface NativeTransportHandle {
  unregisterMemory(addr: bigint): Promise<void>;
  closePeer(peerId: number): void;
  /** One call per batch (struct of arrays); `onBatch(id, ...)` reports. */
  submit(
    peerId: number,
    opcodes: Uint8Array,
    localAddrs: BigUint64Array,
    remoteAddrs: BigUint64Array,
    lengths: BigUint64Array,
    notify: Uint8Array | null,
    /** Gathered writes (TransferBatch.localRows), passed only to a transport that declares `gatherWrites`. */
    localRows?: Uint32Array,
    localPitches?: BigUint64Array,
    /** Scattered writes (TransferBatch.remoteRows), passed only to a transport that declares `scatterWrites`. */
    remoteRows?: Uint32Array,
    remotePitches?: BigUint64Array,
    /** Verified writes (TransferBatch.verifyWrites), passed only to a transport that declares `verifiedWrites`. */
    verifyWrites?: boolean,
  ): number;
  cancel(batchId: number, status: number): void;
  /** Stops the transport on a worker thread; pending batches complete (ABORTED) first. */
  close(): Promise<void>;
}

/** What every te addon exports besides its transport class. */
export interface NativeAddonModule {
  /** Native code throws whatever this factory returns (a TransferError). */
  setErrorFactory(factory: (status: number, message: string) => Error): void;
  /** The code name of a native status ("ADDRESS_OUT_OF_RANGE", ...). */
  statusName(status: number): string;
}

/** A peer opened by a NativeTransportBase: the native id and the transport that owns it. */
export interface NativePeer extends TransportPeer {
  readonly id: number;
  readonly owner: NativeTransportBase<NativeTransportHandle>;
}

/**
 * The TypeScript half every native transport shares: the native object and its callbacks,
 * batches (promise, deadline, abort), peers being opened, notification listeners, peer
 * checks, argument checks and close. A plugin extends it with its options, endpoint,
 * registerMemory, openPeer and describe; the native core does the rest.
 */
export abstract class NativeTransportBase<N extends NativeTransportHandle> implements Transport {
  protected readonly native: N;
  protected readonly plugin: string;
  protected readonly context: TransportContext;
  readonly #batches: BatchTracker;
  readonly #opening = new Map<number, { resolve(): void; reject(e: TransferError): void }>();
  readonly #checks = new Map<number, (status: number, report: string) => void>();
  readonly #listeners = new Set<(n: Notification) => void>();
  #closed = false;

  /** `create` builds the native object from the callbacks this base answers. */
  protected constructor(plugin: string, context: TransportContext, create: (callbacks: NativeCallbacks) => N) {
    this.plugin = plugin;
    this.context = context;
    this.#batches = new BatchTracker(plugin, (id, status) => this.native.cancel(id, status));
    this.native = create({
      onBatch: (id, status, statuses, bytes, message, remoteMayBeWritten) => this.#batches.complete(id, status, statuses, bytes, message, remoteMayBeWritten),
      onOpen: (id, status, message) => this.#opened(id, status, message),
      onNotify: (from, payload) => {
        for (const l of this.#listeners) l({ from, payload });
      },
      onLog: (level, message) => this.log(level, message),
      onCheck: (id, status, report) => {
        const done = this.#checks.get(id);
        this.#checks.delete(id);
        done?.(status, report);
      },
    });
  }

  abstract endpoint(): WireValue;
  abstract registerMemory(request: RegisterRequest): Promise<TransportRegistration>;
  abstract openPeer(peer: SegmentDescriptor): Promise<TransportPeer>;
  abstract describe(): Record<string, WireValue>;

  async unregisterMemory(addr: bigint): Promise<void> {
    this.checkOpen();
    await this.native.unregisterMemory(addr);
  }

  async closePeer(peer: TransportPeer): Promise<void> {
    const p = this.own(peer);
    if (!this.#closed) this.native.closePeer(p.id);
  }

  submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    try {
      this.checkOpen();
      const p = this.own(peer);
      this.checkBatch(p, batch, options);
      const gathers = this.usesRows(batch, 'local');
      const scatters = this.usesRows(batch, 'remote');
      const verify = this.verifyOf(batch);
      const notify = options.notify ?? null;
      const rows = gathers ? batch.localRows : undefined;
      const pitches = gathers ? batch.localPitches : undefined;
      const into = scatters ? batch.remoteRows : undefined;
      const intoPitches = scatters ? batch.remotePitches : undefined;
      const { opcodes, localAddrs, remoteAddrs, lengths } = batch;
      // Only the arguments a batch uses: an addon without remote rows or verified writes reads
      // fewer. Written out, not spread from an array: that array was garbage of every batch.
      const id = verify
        ? this.native.submit(p.id, opcodes, localAddrs, remoteAddrs, lengths, notify, rows, pitches, into, intoPitches, true)
        : scatters
          ? this.native.submit(p.id, opcodes, localAddrs, remoteAddrs, lengths, notify, rows, pitches, into, intoPitches)
          : this.native.submit(p.id, opcodes, localAddrs, remoteAddrs, lengths, notify, rows, pitches);
      return this.#batches.track(id, p.segment, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  onNotification(listener: (notification: Notification) => void): void {
    this.#listeners.add(listener);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Joins the native threads on a worker thread; the ABORTED completions of pending batches arrive first.
    await this.native.close();
    for (const [id, o] of this.#opening) o.reject(this.fail('ABORTED', `transport closed while opening peer ${id}`));
    this.#opening.clear();
    this.#batches.abandonAll('transport closed');
    for (const [, done] of this.#checks) done(NATIVE_STATUS.ABORTED, '{"healthy":false,"rails":[],"error":"transport closed"}');
    this.#checks.clear();
    this.#listeners.clear();
  }

  protected fail(code: TransferErrorCode, message: string): TransferError {
    return new TransferError(code, message, { plugin: this.plugin });
  }

  /** A native warning for the engine's log. */
  protected log(level: 'warn', message: string): void {
    this.context.log(level, `[${this.plugin}] ${message}`);
  }

  /** Whether the addon gathers written rows (`capabilities.gatherWrites`); a transport that does sets it. */
  protected readonly gathersWrites: boolean = false;
  /** Whether the addon writes into remote rows (`capabilities.scatterWrites`); a transport that does sets it. */
  protected readonly scattersWrites: boolean = false;
  /** Whether the addon verifies writes (`capabilities.verifiedWrites`); a transport that does sets it. */
  protected readonly verifiesWrites: boolean = false;

  /** Whether to ask native code to verify the batch's writes; refused unless the addon does. */
  private verifyOf(batch: TransferBatch): boolean {
    if (batch.verifyWrites === undefined || batch.verifyWrites === false) return false;
    if (batch.verifyWrites !== true) throw this.fail('INVALID_ARGUMENT', '`verifyWrites` must be a boolean');
    if (!this.verifiesWrites) throw this.fail('UNSUPPORTED_CAPABILITY', `${this.plugin} does not verify writes (capabilities.verifiedWrites)`);
    if (batch.opcodes.some((op) => op !== OP_WRITE)) throw this.fail('INVALID_ARGUMENT', '`verifyWrites` verifies writes only; this batch has reads');
    return true;
  }

  /**
   * Whether a batch hands native code rows on one side: not when it has none there (rows of 1
   * are ordinary requests); refused unless the addon handles rows on that side.
   */
  private usesRows(batch: TransferBatch, side: 'local' | 'remote'): boolean {
    const rows = side === 'local' ? batch.localRows : batch.remoteRows;
    const pitches = side === 'local' ? batch.localPitches : batch.remotePitches;
    if (rows === undefined) return false;
    if (!(rows instanceof Uint32Array) || !(pitches instanceof BigUint64Array) || rows.length !== batch.opcodes.length || pitches.length !== rows.length)
      throw this.fail('INVALID_ARGUMENT', `\`${side}Rows\` (Uint32Array) and \`${side}Pitches\` (BigUint64Array) need one entry per request`);
    if (!rows.some((r) => r > 1)) return false;
    if (side === 'local' && !this.gathersWrites)
      throw this.fail('UNSUPPORTED_CAPABILITY', `${this.plugin} does not gather written rows (capabilities.gatherWrites)`);
    if (side === 'remote' && !this.scattersWrites)
      throw this.fail('UNSUPPORTED_CAPABILITY', `${this.plugin} does not write into remote rows (capabilities.scatterWrites)`);
    return true;
  }

  /** The checks before a batch reaches native code (a transport without notifications refuses them first). */
  protected checkBatch(peer: NativePeer, batch: TransferBatch, options: SubmitOptions): void {
    checkSubmit(this.plugin, peer.segment, batch, options);
  }

  protected get closed(): boolean {
    return this.#closed;
  }

  protected checkOpen(): void {
    if (this.#closed) throw this.fail('ABORTED', 'transport is closed');
  }

  protected own(peer: TransportPeer): NativePeer {
    const p = peer as NativePeer;
    if (p.owner !== this) throw this.fail('PEER_NOT_FOUND', `peer "${peer.segment}" was not opened by this ${this.plugin} transport`);
    return p;
  }

  /**
   * Whether `peer` is this very process (same epoch). A descriptor with this segment's name
   * but another epoch describes an earlier life of it: STALE_DESCRIPTOR.
   */
  protected isSelf(peer: SegmentDescriptor): boolean {
    const self = peer.epoch === this.context.epoch;
    if (!self && peer.name === this.context.segmentName) {
      throw this.fail(
        'STALE_DESCRIPTOR',
        `descriptor of segment "${peer.name}" has epoch ${peer.epoch}, but this process is epoch ${this.context.epoch}: it describes an earlier life of this segment`,
      );
    }
    return self;
  }

  /** Refuses a peer that does not advertise this transport. */
  protected advertOf(peer: SegmentDescriptor): NonNullable<SegmentDescriptor['transports'][string]> {
    const advert = peer.transports[this.plugin];
    if (!advert) throw this.fail('NO_COMMON_TRANSPORT', `segment "${peer.name}" does not advertise ${this.plugin}`);
    return advert;
  }

  /**
   * The handle of native peer `id` once its onOpen reports success (`waitOpen`: the native
   * side opens asynchronously); a failed open closes the native peer and rethrows.
   */
  protected async peerHandle<P extends object = object>(peer: SegmentDescriptor, id: number, waitOpen: boolean, extra?: P): Promise<NativePeer & P> {
    if (waitOpen) {
      try {
        await new Promise<void>((resolve, reject) => this.#opening.set(id, { resolve, reject }));
      } catch (e) {
        this.native.closePeer(id);
        throw e;
      }
    }
    return { segment: peer.name, epoch: peer.epoch, id, owner: this, ...extra } as NativePeer & P;
  }

  /** Waits for check `id`'s onCheck report. */
  protected checkReport(id: number): Promise<{ status: number; report: string }> {
    return new Promise((resolve) => this.#checks.set(id, (status, report) => resolve({ status, report })));
  }

  /**
   * The host memory of a registration, as native code takes it: `buffer` (a bare
   * SharedArrayBuffer wrapped in a view: it has no Node-API accessor at NAPI 8) or null
   * for a raw `addr`. Refuses a request with neither.
   */
  protected hostBuffer(request: RegisterRequest): ArrayBuffer | ArrayBufferView | null {
    if (!request.buffer && request.addr === undefined) throw this.fail('INVALID_ARGUMENT', 'registerMemory needs `buffer` or `addr`');
    if (request.buffer) keepAttached(request.buffer);
    return request.buffer instanceof SharedArrayBuffer ? new Uint8Array(request.buffer) : (request.buffer ?? null);
  }

  /** Refuses a length that is not a positive bigint. */
  protected checkLength(request: RegisterRequest): void {
    if (typeof request.length !== 'bigint' || request.length <= 0n) throw this.fail('INVALID_ARGUMENT', 'Expected `length` to be a positive bigint');
  }

  #opened(id: number, status: number, message: string): void {
    const o = this.#opening.get(id);
    if (!o) return;
    this.#opening.delete(id);
    if (status === 0) o.resolve();
    else o.reject(TransferError.fromStatus(status, message || `cannot open peer ${id}`, { plugin: this.plugin }));
  }
}
