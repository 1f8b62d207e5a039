import { Socket, createConnection } from 'node:net';
import { batchOf, parseOptions, type TransportContext } from '@te/connector';
import { createWireTransport, wireOptions, type MooncakeWireTransport } from '../src/index.js';

export const logs: string[] = [];

export function context(overrides: Partial<TransportContext> = {}): TransportContext {
  return {
    segmentName: '127.0.0.1:1',
    epoch: 1n,
    bindAddress: '127.0.0.1',
    connectTimeoutMs: 2000,
    env: {},
    log: (level, message) => logs.push(`${level} ${message}`),
    ...overrides,
  };
}

/** A transport built the way the engine builds it (options parsed from the schema). */
export async function wire(options: Record<string, unknown> = {}, ctx: Partial<TransportContext> = {}): Promise<MooncakeWireTransport> {
  const parsed = parseOptions(wireOptions, options, {}, 'mooncake-wire');
  return (await createWireTransport(context(ctx), parsed)) as MooncakeWireTransport;
}

export { batchOf };

/** A registered buffer with `guard` unregistered bytes on both sides (they must never change). */
export async function guarded(
  t: MooncakeWireTransport,
  length: number,
  guard = 4096,
  fill = 0,
): Promise<{ all: Uint8Array; region: Uint8Array; addr: bigint }> {
  const all = new Uint8Array(length + 2 * guard).fill(fill);
  const region = all.subarray(guard, guard + length);
  const reg = await t.registerMemory({ buffer: region, length: BigInt(length), device: 'cpu', remoteAccess: true });
  return { all, region, addr: reg.addr };
}

/** Reads exactly n bytes from a socket (or fewer if it ends: then the promise resolves with what came). */
export function readN(s: Socket, n: number, timeoutMs = 3000): Promise<Buffer> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let have = 0;
    const done = () => {
      clearTimeout(timer);
      s.off('data', onData);
      s.off('close', done);
      const all = Buffer.concat(parts);
      if (all.length > n) s.unshift(all.subarray(n));
      resolve(all.subarray(0, n));
    };
    const onData = (c: Buffer) => {
      parts.push(c);
      have += c.length;
      if (have >= n) done();
    };
    const timer = setTimeout(done, timeoutMs);
    s.on('data', onData);
    s.once('close', done);
  });
}

export function connect(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = createConnection({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
  });
}

/** A Mooncake request header (24 bytes; padding left as `pad` to show it is ignored). */
export function header(size: bigint, addr: bigint, op: number, pad = 0): Buffer {
  const b = Buffer.alloc(24, pad);
  b.writeBigUInt64LE(size, 0);
  b.writeBigUInt64LE(addr, 8);
  b[16] = op;
  return b;
}

export const STATUS_OK = Buffer.from('00000000565443 4d'.replace(/ /g, ''), 'hex');
export const STATUS_REJECTED = Buffer.from('01000000565443 4d'.replace(/ /g, ''), 'hex');

export function closed(s: Socket, timeoutMs = 3000): Promise<boolean> {
  return new Promise((resolve) => {
    if (s.destroyed || s.readableEnded) return resolve(true);
    const timer = setTimeout(() => resolve(false), timeoutMs);
    s.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
    s.resume();
  });
}
