import {
  NativeTransportBase,
  usableCpus,
  type RegisterRequest,
  type SegmentDescriptor,
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

/**
 * The NativeFabricOptions of a transport from the parsed plugin options; `envPrefix` is the
 * prefix the plugin gave fabricOptionsSchema (native messages name its variables).
 */
export function nativeOptions(
  plugin: string,
  context: Pick<TransportContext, 'segmentName' | 'epoch' | 'bindAddress'> & { connectTimeoutMs?: number },
  o: FabricOptions,
  envPrefix = '',
): NativeFabricOptions {
  return {
    plugin,
    envPrefix,
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
    idleSpinUs: o.idleSpinUs,
    notifyQueuePerPeer: o.notifyQueuePerPeer,
    notifyQueueBytes: o.notifyQueueBytes,
  };
}

/**
 * A Transport over the shared libfabric layer (native/fabric). A plugin uses it as is, or
 * adds what is its own on top (a pool registered as the transport's arena).
 */
export class FabricTransport extends NativeTransportBase<NativeFabricTransport> {
  readonly #options: NativeFabricOptions;
  readonly #rails: NativeRail[];
  readonly #endpoint: FabricEndpoint;

  constructor(module: NativeFabricModule, context: TransportContext, options: NativeFabricOptions) {
    super(options.plugin, context, (callbacks) => new module.FabricTransport(options, callbacks));
    this.#options = options;
    this.#rails = this.native.rails();
    this.#endpoint = {
      provider: this.#rails[0]?.provider ?? '',
      protocol: module.protocolVersion,
      rails: this.#rails.map((r) => ({ domain: r.domain, addr: new Uint8Array(r.addr), virtAddr: r.virtAddr })),
    };
  }

  /** RMA operations posted per rail and the slices they carried (slices ÷ ops: how much scatter-gather grouped). */
  rmaCounters(): { ops: number; slices: number }[] {
    this.checkOpen();
    return this.native.rails().map((r) => ({ ops: r.rmaOps, slices: r.rmaSlices }));
  }

  /**
   * Per rail, how often its thread slept on the completion queue (`waits`) and how many
   * of those waits saw the provider move data (`waitsWithData`: a target of RMA writes, which
   * gets no completion of its own); after such a wait the rail polls for `idleSpinUs`.
   */
  waitCounters(): { waits: number; waitsWithData: number }[] {
    this.checkOpen();
    return this.native.rails().map((r) => ({ waits: r.waits, waitsWithData: r.waitsWithData }));
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
    this.checkLength(request);
    const r = await this.native.registerMemory(this.hostBuffer(request), request.addr ?? 0n, request.length, request.remoteAccess);
    return { addr: r.addr, length: request.length, attrs: { keys: r.keys, base: r.base } };
  }

  #parseEndpoint(peer: SegmentDescriptor): FabricEndpoint {
    const e = peer.transports[this.plugin]?.endpoint as Partial<FabricEndpoint> | undefined;
    if (
      !e ||
      typeof e !== 'object' ||
      typeof e.provider !== 'string' ||
      !Array.isArray(e.rails) ||
      e.rails.length === 0 ||
      e.rails.some((r) => !(r?.addr instanceof Uint8Array))
    ) {
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
    const same = this.isSelf(peer);
    if (!same) this.advertOf(peer);
    const ep = same ? this.#endpoint : this.#parseEndpoint(peer);
    if (ep.protocol !== this.#endpoint.protocol)
      throw this.fail(
        'PROTOCOL_MISMATCH',
        `segment "${peer.name}" speaks ${this.plugin} protocol ${ep.protocol}, this build speaks ${this.#endpoint.protocol}`,
      );
    if (ep.provider !== this.#endpoint.provider) {
      throw this.fail(
        'PROTOCOL_MISMATCH',
        `segment "${peer.name}" uses libfabric provider "${ep.provider}", this process "${this.#endpoint.provider}": both sides must use the same provider (set FI_PROVIDER or the provider option alike)`,
      );
    }
    const id = this.native.openPeer(
      peer.name,
      peer.epoch,
      ep.provider,
      ep.rails.map((r) => r.addr),
      ep.rails.map((r) => r.virtAddr === true),
      same,
      this.#regions(peer),
    );
    return this.peerHandle(peer, id, true);
  }

  /** Pings every channel (rail) to a peer and reports whether each answered. */
  async checkSegment(peer: TransportPeer, timeoutMs = 1000): Promise<SegmentHealth> {
    this.checkOpen();
    const p = this.own(peer);
    const { report } = await this.checkReport(this.native.checkPeer(p.id, timeoutMs));
    return { segment: p.segment, ...(JSON.parse(report) as Omit<SegmentHealth, 'segment'>) };
  }

  describe(): Record<string, WireValue> {
    return {
      provider: this.#endpoint.provider,
      rails: this.#rails.map((r) => ({
        domain: r.domain,
        fabric: r.fabric,
        mrMode: mrModeNames(r.mrMode).join('|') || '0',
        keySize: r.keySize,
        addressing: r.virtAddr ? 'virtual address' : 'offset',
        slicesPerOp: r.slicesPerOp,
        deliveryComplete: r.deliveryComplete,
      })),
      sliceSize: this.#options.sliceSize,
      window: this.#options.window,
      // What the rails do (each reads the option once and keeps it: a refused post fails that write only).
      deliveryComplete: this.#rails.every((r) => r.deliveryComplete),
      writeFence: this.#options.writeFence,
      slicesPerOp: this.#options.slicesPerOp,
      idleSpinUs: this.#options.idleSpinUs,
      shmAllowed: this.#options.allowShm,
    };
  }
}
