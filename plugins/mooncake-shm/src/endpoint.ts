import { TransferError, type WireValue } from '@te/connector';
import { PLUGIN_NAME } from './binding.js';
import type { Locality } from './locality.js';

/** What mooncake-shm publishes as its endpoint in the segment descriptor. */
export interface ShmEndpoint extends Locality {
  /** Abstract unix socket name of the target (no leading NUL); '' when disabled. */
  socket: string;
  enabled: boolean;
  protocol: number;
}

export function parseEndpoint(value: WireValue | undefined, peer: string): ShmEndpoint {
  const e = value as Partial<ShmEndpoint> | null | undefined;
  const ok =
    !!e &&
    typeof e === 'object' &&
    typeof e.socket === 'string' &&
    e.socket.length <= 100 &&
    typeof e.enabled === 'boolean' &&
    typeof e.protocol === 'number' &&
    typeof e.bootId === 'string' &&
    typeof e.host === 'string' &&
    typeof e.pidNs === 'string' &&
    typeof e.netNs === 'string' &&
    typeof e.uid === 'number';
  if (!ok) throw new TransferError('INVALID_ARGUMENT', `segment "${peer}" publishes no usable ${PLUGIN_NAME} endpoint`, { plugin: PLUGIN_NAME });
  return e as ShmEndpoint;
}
