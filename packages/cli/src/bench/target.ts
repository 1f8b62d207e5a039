import { TransferError, createTransferEngine, type TeConfig, type TeConfigInput, type TransferEngine } from '@te/connector';
import { BENCH_CORRUPT, BENCH_DIGEST, BENCH_INFO, BENCH_RANDOMIZE, type BenchInfo, type DigestRequest } from './protocol.js';
import { fillRandom, sha256Of } from './whole-buffer.js';

export interface BenchTargetOptions {
  plugin: string;
  modulePath?: string;
  bytes: number;
  bindAddress?: string;
  port?: number;
  transportOptions?: Record<string, unknown>;
  /** The engine config from the commands' one config path; the fields above are ignored when given. */
  config?: TeConfig;
}

export interface BenchTarget {
  engine: TransferEngine;
  close(): Promise<void>;
}

/**
 * The passive side of `te bench` and `te demo`: registers one buffer and answers
 * info and digest requests, so the initiator can verify every byte that landed.
 */
export async function startBenchTarget(options: BenchTargetOptions): Promise<BenchTarget> {
  const config: TeConfigInput = options.config
    ? { ...options.config, role: 'consumer' }
    : { connector: options.plugin, role: 'consumer', metadata: { port: options.port ?? 0 } };
  if (!options.config) {
    if (options.bindAddress) config.bindAddress = options.bindAddress;
    if (options.modulePath) config.modulePath = options.modulePath;
    if (options.transportOptions) config.transportOptions = { [options.plugin]: options.transportOptions };
  }
  const engine = await createTransferEngine(config);
  let handle: Awaited<ReturnType<TransferEngine['allocateMemory']>>;
  try {
    handle = await engine.allocateMemory(options.bytes);
  } catch (e) {
    // An open engine keeps this process alive: close it, so that the error ends the target
    // at once (its parent, with --loopback, waits for it to exit or say it is ready).
    await engine.close().catch(() => undefined);
    throw e;
  }
  const buffer = handle.buffer!;
  fillRandom(buffer);
  const checkRange = ({ offset, length }: DigestRequest): Uint8Array => {
    if (typeof offset !== 'bigint' || typeof length !== 'bigint' || offset < 0n || length < 0n || offset + length > BigInt(buffer.length)) {
      throw new TransferError('INVALID_ARGUMENT', `digest range out of the bench buffer (${buffer.length} bytes)`);
    }
    return buffer.subarray(Number(offset), Number(offset + length));
  };
  engine.control.handle(BENCH_INFO, (): BenchInfo => ({ addr: handle.addr, length: handle.length, plugin: options.plugin }));
  engine.control.handle(BENCH_DIGEST, (body) => sha256Of(checkRange(body as DigestRequest)));
  engine.control.handle(BENCH_CORRUPT, (body) => {
    const byte = checkRange({ offset: (body as DigestRequest).offset, length: 1n });
    byte[0] = ~byte[0]! & 0xff;
    return true;
  });
  engine.control.handle(BENCH_RANDOMIZE, (body) => {
    fillRandom(checkRange(body as DigestRequest));
    return true;
  });
  return { engine, close: () => engine.close() };
}
