import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { parseOptions, type SegmentDescriptor, type Transport, type WireValue } from '@te/connector';
import plugin from '../src/index.js';
import { bootId } from '@te/cuda';

/** The probe, once: GPU-only cases are skipped with its reason when no device is usable. */
export const probe = await plugin.probe!();
export const gpu = probe.available;
export const noGpuReason = `no usable GPU: ${probe.reason ?? 'unknown'}`;

export function newEpoch(): bigint {
  return randomBytes(8).readBigUInt64LE() | 1n;
}

export async function makeTransport(options: Record<string, unknown> = {}, name = `intra-${process.pid}-${randomBytes(3).toString('hex')}`) {
  const epoch = newEpoch();
  const transport = await plugin.create(
    { segmentName: name, epoch, bindAddress: '127.0.0.1', connectTimeoutMs: 5000, env: {}, log: () => {} },
    parseOptions(plugin.options, options, {}, plugin.name),
  );
  return { transport, epoch, name };
}

/** A descriptor of a (pretend) peer on this machine with one CUDA buffer. */
export function peerDescriptor(t: Transport, overrides: Partial<SegmentDescriptor> = {}, attrs?: WireValue): SegmentDescriptor {
  return {
    version: 1,
    name: 'peer-a',
    epoch: newEpoch(),
    hostname: hostname(),
    pid: 1,
    transports: { [plugin.name]: { class: 'intra-nvlink', memoryKinds: ['cuda'], endpoint: t.endpoint() } },
    buffers: [
      {
        addr: 0x7f0000100000n,
        length: 1n << 20n,
        device: 'cuda:0',
        attrs: { [plugin.name]: attrs ?? { base: 0x7f0000000000n, size: 4n << 20n, device: 0, handle: new Uint8Array(64) } },
      },
    ],
    ...overrides,
  };
}

export { bootId };

export async function rejectsWith(p: Promise<unknown> | (() => unknown), code: string | string[]): Promise<Error & { code: string }> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    const err = e as Error & { code: string };
    const codes = Array.isArray(code) ? code : [code];
    if (!codes.includes(err.code)) throw new Error(`expected ${codes.join('|')}, got ${err.code}: ${err.message}`);
    return err;
  }
  throw new Error(`expected a rejection with ${code}, but it resolved`);
}
