import type { Transport, TransportContext } from '@te/connector';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { CudaTransportBase } from '@te/cuda';
import type { IntraNvlinkOptions } from './options.js';

/**
 * GPU memory of processes on one node, over CUDA IPC: registration publishes the
 * allocation's cudaIpcMemHandle; a peer opens it once per allocation and copies with
 * cudaMemcpyAsync on its own streams (NVLink when the GPUs have it, else PCIe).
 */
/** Where this plugin sends what it refuses (host memory, notifications): named in its errors. */
const HOST_TRANSPORT = 'mooncake-tcp';

export class MooncakeIntraNvlinkTransport extends CudaTransportBase {
  constructor(context: TransportContext, options: IntraNvlinkOptions) {
    super(context, {
      plugin: PLUGIN_NAME,
      native: loadBinding(),
      streamsPerDevice: options.streamsPerDevice,
      sliceBytes: options.sliceBytes,
      sameMachineOnly: true,
      hostTransport: HOST_TRANSPORT,
    });
  }
}

export async function createIntraNvlinkTransport(context: TransportContext, options: IntraNvlinkOptions): Promise<Transport> {
  return new MooncakeIntraNvlinkTransport(context, options);
}
