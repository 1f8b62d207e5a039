import type { TransferEngine } from '@te/connector';
import { addressOf } from '@te/staging';

/**
 * What to add to an engine address of registered host memory to get the address the
 * native copier touches: 0 where the engine names memory by its real address (native
 * transports, memory registered by address), the offset to the JS buffer's bytes where a
 * transport written in JavaScript names it by addresses of its own.
 */
export function copyDelta(engine: TransferEngine, addr: number, length: number): number {
  const view = engine.hostView(BigInt(addr), BigInt(length));
  return view ? Number(addressOf(view)) - addr : 0;
}

/** copyDelta for every buffer of a table. */
export function copyDeltas(engine: TransferEngine, addrs: Float64Array, lengths: Float64Array): Float64Array {
  return Float64Array.from(addrs, (a, i) => copyDelta(engine, a, lengths[i]!));
}
