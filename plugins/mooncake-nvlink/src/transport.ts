import type { AllocatedMemory, DeviceName, Transport, TransportContext, WireValue } from '@te/connector';
import { allocateFabricMemory, freeFabricMemory } from './allocator.js';
import { CudaTransportBase, type CudaEndpoint, type NativeExport } from '@te/cuda';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import type { NvlinkOptions } from './options.js';

/**
 * GPU memory shared through cuMem VMM handles: fabric handles reach GPUs of other nodes on
 * a multi-node NVLink fabric; posix-fd handles (served on a unix socket named in the
 * endpoint) run the same import/map path between processes of one machine.
 */
/** Where this plugin sends what it refuses (host memory, notifications): named in its errors. */
const HOST_TRANSPORT = 'mooncake-tcp';

export class MooncakeNvlinkTransport extends CudaTransportBase {
  readonly handleType: NvlinkOptions['handleType'];
  readonly #socket: string;

  constructor(context: TransportContext, options: NvlinkOptions) {
    const native = loadBinding();
    super(context, {
      plugin: PLUGIN_NAME,
      native,
      nativeOptions: { handleType: options.handleType, connectTimeoutMs: context.connectTimeoutMs },
      streamsPerDevice: options.streamsPerDevice,
      sliceBytes: options.sliceBytes,
      sameMachineOnly: options.handleType === 'posix-fd',
      hostTransport: HOST_TRANSPORT,
    });
    this.handleType = options.handleType;
    this.#socket = options.handleType === 'posix-fd' ? native.fdServerName() : '';
  }

  /** The engine's allocator hook (`engine.allocateMemory(n, {device: 'cuda:N'})`): fabric-exportable memory of this transport's handle type. */
  async allocateMemory(length: bigint, device: DeviceName): Promise<AllocatedMemory> {
    if (device === 'cpu') throw this.fail('MEMORY_KIND_UNSUPPORTED', 'mooncake-nvlink allocates GPU memory only; host memory comes from the engine');
    const a = allocateFabricMemory(length, { device: Number(device.slice('cuda:'.length)), handleType: this.handleType });
    // The mapping is granularity-aligned; the caller's length is what gets registered.
    return { addr: a.addr, length };
  }

  async freeMemory(addr: bigint): Promise<void> {
    freeFabricMemory(addr);
  }

  protected override endpointExtra(): Record<string, WireValue> {
    return { handleType: this.handleType, socket: this.#socket };
  }

  protected override attrsOf(e: NativeExport): WireValue {
    return { base: e.base, size: e.size, device: e.device, handle: e.handle, allocId: e.allocId, handleType: this.handleType };
  }

  protected override peerSocket(endpoint: CudaEndpoint | undefined): string {
    if (!endpoint) return '';
    if (endpoint.handleType !== undefined && endpoint.handleType !== this.handleType) {
      throw this.fail(
        'NO_COMMON_TRANSPORT',
        `the peer shares memory with ${String(endpoint.handleType)} handles, this process with ${this.handleType}: set the same handleType (TE_NVLINK_HANDLE_TYPE) on both`,
      );
    }
    return typeof endpoint.socket === 'string' ? endpoint.socket : '';
  }
}

export async function createNvlinkTransport(context: TransportContext, options: NvlinkOptions): Promise<Transport> {
  return new MooncakeNvlinkTransport(context, options);
}
