// The segment descriptor of a mooncake-tcp endpoint known only from what it reports about
// itself: tests (and the multi-host fixtures) run no engine and no metadata store.
import type { SegmentDescriptor } from '@te/connector';

/** How an endpoint describes itself (u64 values as decimal strings, as they cross IPC). */
export interface BenchEndpointInfo {
  name: string;
  epoch: string;
  endpoint: unknown;
  addr: string;
  length: string;
}

export function descriptorOf(info: BenchEndpointInfo): SegmentDescriptor {
  return {
    version: 1,
    name: info.name,
    epoch: BigInt(info.epoch),
    hostname: 'bench',
    pid: 0,
    transports: { 'mooncake-tcp': { class: 'tcp', memoryKinds: ['cpu'], endpoint: info.endpoint as never } },
    buffers: [{ addr: BigInt(info.addr), length: BigInt(info.length), device: 'cpu', attrs: {} }],
  };
}
