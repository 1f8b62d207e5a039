// Shared pieces of the mooncake-shm tests: transports driven directly (no engine in
// between, so the target's own range checks are what refuses a bad request) and byte patterns.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { parseOptions, type SegmentDescriptor, type Transport } from '@te/connector';
import plugin from '../src/index.js';

export function pattern(seed: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 255;
  }
  return out;
}

export interface Endpoint {
  transport: Transport;
  name: string;
  epoch: bigint;
  warnings: string[];
  descriptor(): SegmentDescriptor;
}

export async function createEndpoint(name: string, options: Record<string, unknown> = {}): Promise<Endpoint> {
  const epoch = randomBytes(8).readBigUInt64LE() | 1n;
  const warnings: string[] = [];
  const transport = await plugin.create(
    {
      segmentName: name,
      epoch,
      bindAddress: '127.0.0.1',
      connectTimeoutMs: 3000,
      env: {},
      log: (level, message) => level === 'warn' && warnings.push(message),
    },
    parseOptions(plugin.options, options, {}, plugin.name),
  );
  return {
    transport,
    name,
    epoch,
    warnings,
    descriptor: () => ({
      version: 1,
      name,
      epoch,
      hostname: hostname(),
      pid: process.pid,
      transports: { [plugin.name]: { class: plugin.capabilities.class, memoryKinds: ['cpu'], endpoint: transport.endpoint() } },
      buffers: [],
    }),
  };
}

/** Registers `buffer` (or a part of it) with remote access unless told otherwise. */
export async function register(t: Transport, buffer: Uint8Array, remoteAccess = true): Promise<bigint> {
  return (await t.registerMemory({ buffer, length: BigInt(buffer.length), device: 'cpu', remoteAccess })).addr;
}
