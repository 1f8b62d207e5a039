import {
  BatchTracker,
  TransferError,
  checkSubmit,
  type BatchResult,
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
import { localEndpoint, parseEndpoint, peerInfoOf, sameMachine, type CudaEndpoint } from './descriptor.js';
import type { NativeCudaModule, NativeCudaTransport, NativeExport } from './native-types.js';

export interface CudaTransportSettings {
  plugin: string;
  native: NativeCudaModule;
  streamsPerDevice: number;
  sliceBytes: number;
  /** Extra options for the native constructor (mooncake-nvlink: handleType). */
  nativeOptions?: Record<string, string | number>;
  /** Whether peers must run on this machine (CUDA IPC, posix-fd handles). */
  sameMachineOnly: boolean;
}

interface CudaPeer extends TransportPeer {
  readonly id: number;
  readonly owner: CudaTransportBase;
}

/** Parses `cuda:N`; host memory is refused with the transport to use instead. */
export function cudaOrdinal(device: string, plugin: string): number {
  const m = /^cuda:(\d+)$/.exec(device);
  if (!m) {
    throw new TransferError(
      'MEMORY_KIND_UNSUPPORTED',
      `cannot register ${device} memory: ${plugin} moves GPU memory only (capabilities.memoryKinds = ['cuda']); host memory goes through mooncake-tcp (list it in \`transports\`)`,
      { plugin },
    );
  }
  return Number(m[1]);
}

/**
 * The TypeScript half shared by mooncake-intra-nvlink and mooncake-nvlink: option and
 * argument checks, descriptor parsing, deadlines and aborts; copies run natively.
 */
export abstract class CudaTransportBase implements Transport {
  protected readonly native: NativeCudaTransport;
  protected readonly context: TransportContext;
  protected readonly settings: CudaTransportSettings;
  readonly #batches: BatchTracker;
  #closed = false;

  constructor(context: TransportContext, settings: CudaTransportSettings) {
    this.context = context;
    this.settings = settings;
    this.native = new settings.native.CudaTransport(
      { ...settings.nativeOptions, streamsPerDevice: settings.streamsPerDevice, sliceBytes: settings.sliceBytes },
      { onBatch: (id, status, statuses, bytes, message) => this.#batches.complete(id, status, statuses, bytes, message) },
    );
    this.#batches = new BatchTracker(settings.plugin, (id, status) => this.native.cancel(id, status));
  }

  protected fail(code: ConstructorParameters<typeof TransferError>[0], message: string): TransferError {
    return new TransferError(code, message, { plugin: this.settings.plugin });
  }

  /** Extra endpoint fields (mooncake-nvlink: its fd socket). */
  protected endpointExtra(): Record<string, WireValue> {
    return {};
  }

  /** The attrs published for a registration. */
  protected attrsOf(e: NativeExport): WireValue {
    return { base: e.base, size: e.size, device: e.device, handle: e.handle };
  }

  /** Hook before a registration reaches native code (mooncake-nvlink: allocator check). */
  protected beforeRegister(_addr: bigint, _length: bigint, _device: number): void {}

  /** The backend endpoint given to native openPeer (the peer's socket for posix-fd). */
  protected peerSocket(_endpoint: CudaEndpoint | undefined): string {
    return '';
  }

  endpoint(): WireValue {
    return localEndpoint(this.settings.native.backend, this.endpointExtra());
  }

  async registerMemory(request: RegisterRequest): Promise<TransportRegistration> {
    this.#checkOpen();
    const device = cudaOrdinal(request.device, this.settings.plugin);
    if (request.buffer !== undefined || request.addr === undefined) {
      throw this.fail('INVALID_ARGUMENT', 'GPU memory is registered by address: pass {addr, length, device: "cuda:N"}, not a JS buffer');
    }
    if (typeof request.length !== 'bigint' || request.length <= 0n) throw this.fail('INVALID_ARGUMENT', 'Expected `length` to be a positive bigint');
    this.beforeRegister(request.addr, request.length, device);
    const e = this.native.registerMemory(request.addr, request.length, device, request.remoteAccess);
    return { addr: request.addr, length: request.length, attrs: this.attrsOf(e) };
  }

  async unregisterMemory(addr: bigint): Promise<void> {
    this.#checkOpen();
    await this.native.unregisterMemory(addr);
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.#checkOpen();
    const { plugin } = this.settings;
    const local = peer.epoch === this.context.epoch;
    if (!local && peer.name === this.context.segmentName) {
      throw this.fail('STALE_DESCRIPTOR', `descriptor of segment "${peer.name}" has epoch ${peer.epoch}, but this process is epoch ${this.context.epoch}: it describes an earlier life of this segment`);
    }
    let endpoint: CudaEndpoint | undefined;
    if (!local) {
      const advert = peer.transports[plugin];
      if (!advert) throw this.fail('NO_COMMON_TRANSPORT', `segment "${peer.name}" does not advertise ${plugin}`);
      endpoint = parseEndpoint(advert.endpoint, plugin, peer.name);
      if (this.settings.sameMachineOnly && !sameMachine(endpoint)) {
        throw this.fail('PEER_UNREACHABLE', `segment "${peer.name}" runs on host ${endpoint.host} (boot id ${endpoint.bootId || '?'}), not on this machine: ${plugin} (${this.settings.native.backend}) reaches GPUs of one node only`);
      }
    }
    const info = peerInfoOf(peer, plugin, local, this.peerSocket(endpoint));
    const id = this.native.openPeer(info);
    const handle: CudaPeer = { segment: peer.name, epoch: peer.epoch, id, owner: this };
    return handle;
  }

  async closePeer(peer: TransportPeer): Promise<void> {
    const p = this.#own(peer);
    if (!this.#closed) this.native.closePeer(p.id);
  }

  submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    try {
      this.#checkOpen();
      const p = this.#own(peer);
      if (options.notify) throw this.fail('UNSUPPORTED_CAPABILITY', `${this.settings.plugin} does not deliver notifications (capabilities.notifications is false); send them over mooncake-tcp`);
      checkSubmit(this.settings.plugin, p.segment, batch, options);
      const id = this.native.submit(p.id, batch.opcodes, batch.localAddrs, batch.remoteAddrs, batch.lengths);
      return this.#batches.track(id, p.segment, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Peer allocations opened in this process (IPC handles or VMM mappings). */
  importsOpen(): number {
    return this.#closed ? 0 : this.native.importsOpen();
  }

  describe(): Record<string, WireValue> {
    const p = this.settings.native.probe();
    return {
      backend: this.settings.native.backend,
      builtWithCuda: p.builtWithCuda,
      cudaRuntime: p.runtimeVersion,
      cudaDriver: p.driverVersion,
      devices: p.devices.map((d) => `cuda:${d.ordinal} ${d.name} (${d.pciBusId})`),
      streamsPerDevice: this.settings.streamsPerDevice,
      sliceBytes: this.settings.sliceBytes,
      ...(p.reason ? { problem: p.reason } : {}),
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Joins the copy thread (which waits for copies in flight) on a worker thread; pending
    // batches are delivered as ABORTED before it resolves.
    await this.native.close();
    this.#batches.abandonAll('transport closed');
  }

  #checkOpen(): void {
    if (this.#closed) throw this.fail('ABORTED', 'transport is closed');
  }

  #own(peer: TransportPeer): CudaPeer {
    const p = peer as CudaPeer;
    if (p.owner !== this) throw this.fail('PEER_NOT_FOUND', `peer "${peer.segment}" was not opened by this ${this.settings.plugin} transport`);
    return p;
  }
}
