import { TransferError } from '../errors/transfer-error.js';
import type { SegmentDescriptor } from '../spi/descriptor.js';
import { isDeviceName } from '../spi/memory.js';

/**
 * Checks a descriptor received from a peer before anything trusts it: a malformed one
 * is a typed error, never a crash later in routing or native code.
 */
export function checkDescriptor(value: unknown, from: string): SegmentDescriptor {
  const bad = (why: string): never => {
    throw new TransferError('BAD_FRAME', `Segment descriptor from ${from} is malformed: ${why}`, { details: { from } });
  };
  if (typeof value !== 'object' || value === null) bad('not an object');
  const d = value as Record<string, unknown>;
  if (typeof d.version !== 'number') bad('no version');
  if (typeof d.name !== 'string' || d.name === '') bad('no name');
  if (typeof d.epoch !== 'bigint') bad('epoch is not a u64');
  if (typeof d.transports !== 'object' || d.transports === null) bad('no transports');
  if (!Array.isArray(d.buffers)) bad('no buffers');
  for (const [name, advert] of Object.entries(d.transports as Record<string, unknown>)) {
    const a = advert as Record<string, unknown> | null;
    if (typeof a !== 'object' || a === null || typeof a.class !== 'string' || !Array.isArray(a.memoryKinds))
      bad(`transport "${name}" has no class or memory kinds`);
  }
  for (const b of d.buffers as unknown[]) {
    const buf = b as Record<string, unknown> | null;
    if (typeof buf !== 'object' || buf === null || typeof buf.addr !== 'bigint' || typeof buf.length !== 'bigint' || !isDeviceName(buf.device)) {
      bad('a buffer lacks a u64 addr/length or a device');
    }
    if (typeof buf!.attrs !== 'object' || buf!.attrs === null) buf!.attrs = {};
  }
  return d as unknown as SegmentDescriptor;
}
