import {
  NativeTransportBase,
  TransferError,
  checkSubmit,
  type NativePeer,
  type RegisterRequest,
  type SegmentDescriptor,
  type SubmitOptions,
  type TransferBatch,
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
  /**
   * The transport the plugin suggests for what a CUDA transport refuses (host memory,
   * notifications); a generic phrase where it names none.
   */
  hostTransport?: string;
}

const ANY_HOST_TRANSPORT = 'a transport that moves host memory';

/** Parses `cuda:N`; host memory is refused with the transport to use instead. */
export function cudaOrdinal(device: string, plugin: string, hostTransport = ANY_HOST_TRANSPORT): number {
  const m = /^cuda:(\d+)$/.exec(device);
  if (!m) {
    throw new TransferError(
      'MEMORY_KIND_UNSUPPORTED',
      `cannot register ${device} memory: ${plugin} moves GPU memory only (capabilities.memoryKinds = ['cuda']); host memory goes through ${hostTransport} (list it in \`transports\`)`,
      { plugin },
    );
  }
  return Number(m[1]);
}

/**
 * The TypeScript half shared by the CUDA transports: option and argument checks,
 * descriptor parsing, deadlines and aborts (NativeTransportBase); copies run natively.
 */
export abstract class CudaTransportBase extends NativeTransportBase<NativeCudaTransport> {
  protected readonly settings: CudaTransportSettings;

  constructor(context: TransportContext, settings: CudaTransportSettings) {
    super(
      settings.plugin,
      context,
      (callbacks) =>
        new settings.native.CudaTransport(
          { ...settings.nativeOptions, streamsPerDevice: settings.streamsPerDevice, sliceBytes: settings.sliceBytes },
          callbacks,
        ),
    );
    this.settings = settings;
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
    this.checkOpen();
    const device = cudaOrdinal(request.device, this.plugin, this.settings.hostTransport);
    if (request.buffer !== undefined || request.addr === undefined) {
      throw this.fail('INVALID_ARGUMENT', 'GPU memory is registered by address: pass {addr, length, device: "cuda:N"}, not a JS buffer');
    }
    this.checkLength(request);
    this.beforeRegister(request.addr, request.length, device);
    const e = this.native.registerMemory(request.addr, request.length, device, request.remoteAccess);
    return { addr: request.addr, length: request.length, attrs: this.attrsOf(e) };
  }

  async openPeer(peer: SegmentDescriptor): Promise<TransportPeer> {
    this.checkOpen();
    const local = this.isSelf(peer);
    let endpoint: CudaEndpoint | undefined;
    if (!local) {
      endpoint = parseEndpoint(this.advertOf(peer).endpoint, this.plugin, peer.name);
      if (this.settings.sameMachineOnly && !sameMachine(endpoint)) {
        throw this.fail(
          'PEER_UNREACHABLE',
          `segment "${peer.name}" runs on host ${endpoint.host} (boot id ${endpoint.bootId || '?'}), not on this machine: ${this.plugin} (${this.settings.native.backend}) reaches GPUs of one node only`,
        );
      }
    }
    const id = this.native.openPeer(peerInfoOf(peer, this.plugin, local, this.peerSocket(endpoint)));
    return this.peerHandle(peer, id, false);
  }

  /** The CUDA transports deliver no notifications: a batch that asks for one is refused before native code. */
  protected override checkBatch(peer: NativePeer, batch: TransferBatch, options: SubmitOptions): void {
    if (options.notify)
      throw this.fail(
        'UNSUPPORTED_CAPABILITY',
        `${this.plugin} does not deliver notifications (capabilities.notifications is false); send them over ${this.settings.hostTransport ?? ANY_HOST_TRANSPORT}`,
      );
    checkSubmit(this.plugin, peer.segment, batch, options);
  }

  /** Peer allocations opened in this process (IPC handles or VMM mappings). */
  importsOpen(): number {
    return this.closed ? 0 : this.native.importsOpen();
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
}
