// Shared pieces of the CUDA transports (mooncake-intra-nvlink and mooncake-nvlink).
export { addonLoader, type AddonSpec } from './loader.js';
export { CudaTransportBase, cudaOrdinal, type CudaTransportSettings } from './transport-base.js';
export { probeCuda } from './probe.js';
export { localEndpoint, parseEndpoint, parseAttrs, peerInfoOf, sameMachine, bootId, type CudaEndpoint, type CudaBufferAttrs } from './descriptor.js';
export type * from './native-types.js';
export { deviceMemoryOf, type DeviceMemory } from './device-memory.js';
export { cudaEventsOf, type CudaEvents } from './events.js';
