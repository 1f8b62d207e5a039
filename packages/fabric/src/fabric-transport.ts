import {
  BatchTracker,
  NATIVE_STATUS,
  TransferError,
  checkSubmit,
  usableCpus,
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
import type { NativeFabricModule, NativeFabricOptions, NativeFabricTransport, NativeRail, NativeRemoteRegion } from './native-types.js';
import type { FabricOptions } from './options.js';

/** What a libfabric plugin publishes as its endpoint in the segment descriptor. */
export interface FabricEndpoint {
  provider: string;
  protocol: number;
  rails: { domain: string; addr: Uint8Array; virtAddr: boolean }[];
}

/** What checkSegment() reports about the channels to a peer. */
export interface SegmentHealth {
  segment: string;
  healthy: boolean;
  rails: { rail: number; ok: boolean; rttMs?: number; error?: string }[];
  error?: string;
}

interface FabricPeer extends TransportPeer {
  readonly id: number;
  readonly owner: FabricTransport;
}

const MR_BITS: [number, string][] = [
  [1 << 0, 'FI_MR_LOCAL'],
  [1 << 1, 'FI_MR_RAW'],
  [1 << 2, 'FI_MR_VIRT_ADDR'],
  [1 << 3, 'FI_MR_ALLOCATED'],
  [1 << 4, 'FI_MR_PROV_KEY'],
  [1 << 5, 'FI_MR_MMU_NOTIFY'],
  [1 << 6, 'FI_MR_RMA_EVENT'],
  [1 << 7, 'FI_MR_ENDPOINT'],
  [1 << 8, 'FI_MR_HMEM'],
];

export function mrModeNames(mode: number): string[] {
  return MR_BITS.filter(([bit]) => (mode & bit) !== 0).map(([, name]) => name);
}

function isWildcard(address: string): boolean {
  return address === '0.0.0.0' || address === '::' || address === '';
}

/** The NativeFabricOptions of a transport from the parsed plugin options. */
export function nativeOptions(plugin: string, context: Pick<TransportContext, 'segmentName' | 'epoch' | 'bindAddress'> & { connectTimeoutMs?: number }, o: FabricOptions): NativeFabricOptions {
  return {
    plugin,
    segmentName: context.segmentName,
    epoch: context.epoch,
    provider: o.provider ?? '',
    nics: o.nics,
    sourceAddress: o.sourceAddress ?? (isWildcard(context.bindAddress) ? '' : context.bindAddress),
    allowShm: o.allowShm,
    maxRails: o.maxRails,
    railsPerNic: o.railsPerNic,
    cpus: usableCpus(),
    sliceSize: o.sliceSize,
    window: o.window,
    connectTimeoutMs: o.connectTimeoutMs ?? context.connectTimeoutMs ?? 3000,
    cancelGraceMs: o.cancelGraceMs,
    deliveryComplete: o.deliveryComplete,
    writeFence: o.writeFence,
    slicesPerOp: o.slicesPerOp,
    notifyQueuePerPeer: o.notifyQueuePerPeer,
    notifyQueueBytes: o.notifyQueueBytes,
  };
}

/**
 * A Transport over the shared libfabric layer (native/fabric). mooncake-rdma uses it as
 * is; barex adds the pool on top.
 */
export class FabricTransport implements Transport {
  protected readonly native: NativeFabricTransport;
  protected readonly plugin: string;
  readonly #context: TransportContext;
  readonly #options: NativeFabricOptions;
  readonly #rails: NativeRail[];
  readonly #endpoint: FabricEndpoint;
  readonly #batches: BatchTracker;
  readonly #opening = new Map<number, { resolve(): void; reject(e: TransferError): void }>();
  readonly #checks = new Map<number, (status: number, report: string) => void>();
  readonly #listeners = new Set<(n: Notification) => void>();
  #closed = false;

  constructor(module: NativeFabricModule, context: TransportContext, options: NativeFabricOptions) {
    this.plugin = options.plugin;
    this.#context = context;
    this.#options = options;
    this.native = new module.FabricTransport(options, {
      onBatch: (id, status, statuses, bytes, message, remoteMayBeWritten) => this.#batches.complete(id, status, statuses, bytes, message, remoteMayBeWritten),
      onOpen: (id, status, message) => this.#onOpen(id, status, message),
      onNotify: (from, payload) => {
        for (const l of this.#listeners) l({ from, payload });
      },
      onCheck: (id, status, report) => {
        const done = this.#checks.get(id);
        this.#checks.delete(id);
        done?.(status, report);
      },
    });
    this.#batches = new BatchTracker(this.plugin, (id, status) => this.native.cancel(id, status));
    this.#rails = this.native.rails();
    this.#endpoint = {
      provider: this.#rails[0]?.provider ?? '',
      protocol: module.protocolVersion,
      rails: this.#rails.map((r) => ({ domain: r.domain, addr: new Uint8Array(r.addr), virtAddr: r.virtAddr })),
    };
  }

  protected fail(code: ConstructorParameters<typeof TransferError>[0], message: string): TransferError {
    return new TransferError(code, message, { plugin: this.plugin });
  }

  /** RMA operations posted per rail and the slices they carried (slices ÷ ops: how much scatter-gather grouped). */
  rmaCounters(): { ops: number; slices: number }[] {
    this.checkOpen();
    return this.native.rails().map((r) => ({ ops: r.rmaOps, slices: r.rmaSlices }));
  }

  endpoint(): WireValue {
    return { provider: this.#endpoint.provider, protocol: this.#endpoint.protocol, rails: this.#endpoint.rails.map((r) => ({ ...r })) };
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.checkOpen();
    if (request.device !== 'cpu') {
      throw this.fail(
        'MEMORY_KIND_UNSUPPORTED',
        `cannot register ${request.device} memory: this build of ${this.plugin} registers host memory only (capabilities.memoryKinds = ['cpu']; GPU memory needs FI_HMEM, which is not wired up yet)`,
      );
    }
    if (typeof request.length !== 'bigint' || request.length <= 0n) throw this.fail('INVALID_ARGUMENT', 'Expected `length` to be a positive bigint');
    if (!request.buffer && request.addr === undefined) throw this.fail('INVALID_ARGUMENT', 'registerMemory needs `buffer` or `addr`');
    const buffer = request.buffer instanceof SharedArrayBuffer ? new Uint8Array(request.buffer) : request.buffer ?? null;
    const r = await this.native.registerMemory(buffer, request.addr ?? 0n, request.length, request.remoteAccess);
    return { addr: r.addr, length: request.length, attrs: { keys: r.keys, base: r.base } };
  }

  async unregisterMemory(addr: bigint): Promise<void> {
    this.checkOpen();
    await this.native.unregisterMemory(addr);
  }

  #parseEndpoint(peer: SegmentDescriptor): FabricEndpoint {
    const e = peer.transports[this.plugin]?.endpoint as Partial<FabricEndpoint> | undefined;
    if (!e || typeof e !== 'object' || typeof e.provider !== 'string' || !Array.isArray(e.rails) || e.rails.length === 0 || e.rails.some((r) => !(r?.addr instanceof Uint8Array))) {
      throw this.fail('INVALID_ARGUMENT', `segment "${peer.name}" publishes no usable ${this.plugin} endpoint ({provider, rails: [{addr}]})`);
    }
    return { provider: e.provider, protocol: typeof e.protocol === 'number' ? e.protocol : 1, rails: e.rails as FabricEndpoint['rails'] };
  }

  #regions(peer: SegmentDescriptor): NativeRemoteRegion[] {
    const out: NativeRemoteRegion[] = [];
    for (const b of peer.buffers) {
      const a = b.attrs?.[this.plugin] as { keys?: unknown; base?: unknown } | undefined;
      if (!a || !Array.isArray(a.keys) || a.keys.some((k) => typeof k !== 'bigint') || typeof a.base !== 'bigint') continue;
      out.push({ addr: b.addr, length: b.length, base: a.base, keys: a.keys as bigint[] });
    }
    return out;
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.checkOpen();
    const same = peer.epoch === this.#context.epoch;
    if (!same && peer.name === this.#context.segmentName) {
      throw this.fail('STALE_DESCRIPTOR', `descriptor of segment "${peer.name}" has epoch ${peer.epoch}, but this process is epoch ${this.#context.epoch}: it describes an earlier life of this segment`);
    }
    if (!same && !peer.transports[this.plugin]) throw this.fail('NO_COMMON_TRANSPORT', `segment "${peer.name}" does not advertise ${this.plugin}`);
    const ep = same ? this.#endpoint : this.#parseEndpoint(peer);
    if (ep.protocol !== this.#endpoint.protocol) throw this.fail('PROTOCOL_MISMATCH', `segment "${peer.name}" speaks ${this.plugin} protocol ${ep.protocol}, this build speaks ${this.#endpoint.protocol}`);
    if (ep.provider !== this.#endpoint.provider) {
      throw this.fail('PROTOCOL_MISMATCH', `segment "${peer.name}" uses libfabric provider "${ep.provider}", this process "${this.#endpoint.provider}": both sides must use the same provider (set FI_PROVIDER or the provider option alike)`);
    }
    const id = this.native.openPeer(peer.name, peer.epoch, ep.provider, ep.rails.map((r) => r.addr), ep.rails.map((r) => r.virtAddr === true), same, this.#regions(peer));
    try {
      await new Promise<void>((resolve, reject) => this.#opening.set(id, { resolve, reject }));
    } catch (e) {
      this.native.closePeer(id);
      throw e;
    }
    const handle: FabricPeer = { segment: peer.name, epoch: peer.epoch, id, owner: this };
    return handle;
  }

  async closePeer(peer: TransportPeer): Promise<void> {
    const p = this.own(peer);
    if (!this.#closed) this.native.closePeer(p.id);
  }

  /** Pings every channel (rail) to a peer and reports whether each answered. */
  checkSegment(peer: TransportPeer, timeoutMs = 1000): Promise<SegmentHealth> {
    return new Promise((resolve, reject) => {
      try {
        this.checkOpen();
        const p = this.own(peer);
        const id = this.native.checkPeer(p.id, timeoutMs);
        this.#checks.set(id, (_status, report) => {
          const r = JSON.parse(report) as Omit<SegmentHealth, 'segment'>;
          resolve({ segment: p.segment, ...r });
        });
      } catch (e) {
        reject(e);
      }
    });
  }

  submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    try {
      this.checkOpen();
      const p = this.own(peer);
      checkSubmit(this.plugin, p.segment, batch, options);
      const id = this.native.submit(p.id, batch.opcodes, batch.localAddrs, batch.remoteAddrs, batch.lengths, options.notify ?? null);
      return this.#batches.track(id, p.segment, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  onNotification(listener: (notification: Notification) => void): void {
    this.#listeners.add(listener);
  }

  describe(): Record<string, WireValue> {
    return {
      provider: this.#endpoint.provider,
      rails: this.#rails.map((r) => ({ domain: r.domain, fabric: r.fabric, mrMode: mrModeNames(r.mrMode).join('|') || '0', keySize: r.keySize, addressing: r.virtAddr ? 'virtual address' : 'offset', slicesPerOp: r.slicesPerOp, deliveryComplete: r.deliveryComplete })),
      sliceSize: this.#options.sliceSize,
      window: this.#options.window,
      // What the rails do (each reads the option once and keeps it: a refused post fails that write only).
      deliveryComplete: this.#rails.every((r) => r.deliveryComplete),
      writeFence: this.#options.writeFence,
      slicesPerOp: this.#options.slicesPerOp,
      shmAllowed: this.#options.allowShm,
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Stops the rails on a worker thread; the ABORTED completions of pending batches arrive first.
    await this.native.close();
    for (const [id, o] of this.#opening) o.reject(this.fail('ABORTED', `transport closed while opening peer ${id}`));
    this.#opening.clear();
    this.#batches.abandonAll('transport closed');
    for (const [, done] of this.#checks) done(NATIVE_STATUS.ABORTED, '{"healthy":false,"rails":[],"error":"transport closed"}');
    this.#checks.clear();
    this.#listeners.clear();
  }

  protected get closed(): boolean {
    return this.#closed;
  }

  protected checkOpen(): void {
    if (this.#closed) throw this.fail('ABORTED', 'transport is closed');
  }

  protected own(peer: TransportPeer): FabricPeer {
    const p = peer as FabricPeer;
    if (p.owner !== this) throw this.fail('PEER_NOT_FOUND', `peer "${peer.segment}" was not opened by this ${this.plugin} transport`);
    return p;
  }

  #onOpen(id: number, status: number, message: string): void {
    const o = this.#opening.get(id);
    if (!o) return;
    this.#opening.delete(id);
    if (status === 0) o.resolve();
    else o.reject(TransferError.fromStatus(status, message || `cannot open peer ${id}`, { plugin: this.plugin }));
  }
}
