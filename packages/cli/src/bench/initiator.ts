import {
  OP_READ,
  OP_WRITE,
  TransferError,
  allocateBatch,
  createTransferEngine,
  type TeConfigInput,
  type TransferBatch,
  type TransferEngine,
} from '@te/connector';
import { BENCH_CORRUPT, BENCH_DIGEST, BENCH_INFO, BENCH_RANDOMIZE, type BenchInfo } from './protocol.js';
import type { BenchOptions, BenchResult } from './options.js';
import { fillRandom, sha256Of } from './whole-buffer.js';
import { benchResult, timedRun } from './timed-run.js';

export type { BenchOptions, BenchResult } from './options.js';

/** Bytes the target must register for these options. */
export function benchBytes(o: Pick<BenchOptions, 'blockSize' | 'batchSize' | 'concurrency'>): number {
  return o.blockSize * o.batchSize * o.concurrency;
}

function workerBatch(op: 'write' | 'read', worker: number, o: BenchOptions, local: bigint, remote: bigint): TransferBatch {
  const batch = allocateBatch(o.batchSize);
  const base = BigInt(worker * o.batchSize * o.blockSize);
  for (let i = 0; i < o.batchSize; i++) {
    const off = base + BigInt(i * o.blockSize);
    batch.opcodes[i] = op === 'write' ? OP_WRITE : OP_READ;
    batch.localAddrs[i] = local + off;
    batch.remoteAddrs[i] = remote + off;
    batch.lengths[i] = BigInt(o.blockSize);
  }
  return batch;
}

/**
 * The verifier's own test: with TE_BENCH_CORRUPT_BYTE=<offset> one byte of the timed run's
 * destination (the target's buffer for writes, this side's for reads) is flipped after the
 * timed run, and the verification must then fail. Unset in every real run.
 */
async function corruptForSelfTest(o: BenchOptions, local: Uint8Array, corruptRemote: (offset: bigint) => Promise<unknown>): Promise<void> {
  const raw = process.env.TE_BENCH_CORRUPT_BYTE;
  if (raw === undefined || raw === '') return;
  const offset = Number(raw);
  if (!Number.isInteger(offset) || offset < 0 || offset >= local.length)
    throw new TransferError('INVALID_ARGUMENT', `TE_BENCH_CORRUPT_BYTE must be a byte offset below ${local.length}, got ${raw}`);
  if (o.op === 'write') await corruptRemote(BigInt(offset));
  else local[offset] = ~local[offset]! & 0xff;
}

/**
 * The active side of `te bench`: `concurrency` workers, each submitting batches of
 * `batchSize` requests of `blockSize` bytes over its own slice of the buffers, for
 * `durationS` seconds. Latency is per batch. A verified batch runs before timing.
 */
export async function runBench(o: BenchOptions): Promise<BenchResult> {
  const config: TeConfigInput = o.config ? { ...o.config, role: 'producer' } : { connector: o.plugin, role: 'producer' };
  if (!o.config) {
    if (o.modulePath) config.modulePath = o.modulePath;
    if (o.bindAddress) config.bindAddress = o.bindAddress;
    if (o.transportOptions) config.transportOptions = { [o.plugin]: o.transportOptions };
  }
  const engine = await createTransferEngine(config);
  try {
    return await measure(engine, o);
  } finally {
    await engine.close();
  }
}

async function measure(engine: TransferEngine, o: BenchOptions): Promise<BenchResult> {
  const total = benchBytes(o);
  const control = engine.controlClient(o.target);
  const info = await control.request<BenchInfo>(BENCH_INFO, null, Math.min(o.timeoutMs ?? 10_000, 10_000));
  if (info.length < BigInt(total)) throw new TransferError('INVALID_ARGUMENT', `target buffer has ${info.length} bytes, the run needs ${total}`);
  // From the engine's allocator: pool-model transports (barex) only reach pool memory.
  const handle = await engine.allocateMemory(total);
  const local = handle.buffer!;
  fillRandom(local);
  const timeoutMs = o.timeoutMs ?? 30_000;
  const remoteDigest = (): Promise<string> => control.request<string>(BENCH_DIGEST, { offset: 0n, length: BigInt(total) }, 60_000);
  const batches = Array.from({ length: o.concurrency }, (_, w) => workerBatch(o.op, w, o, handle.addr, info.addr));

  // Correctness before speed: one full pass in each direction that matters, checked by digest.
  await Promise.all(batches.map((b) => engine.transfer(o.target, b, { timeoutMs })));
  const afterFirstPass = o.op === 'write' ? await remoteDigest() : sha256Of(local);
  const expected = o.op === 'write' ? sha256Of(local) : await remoteDigest();
  if (afterFirstPass !== expected)
    throw new TransferError('TRANSFER_FAILED', `pre-timing check failed: ${o.op} data does not match (sha256 ${afterFirstPass} vs ${expected})`);

  if (o.verify) {
    // Fresh contents so that the final check proves the timed run moved the bytes.
    if (o.op === 'write') fillRandom(local);
    else {
      await control.request(BENCH_RANDOMIZE, { offset: 0n, length: BigInt(total) }, 60_000);
      local.fill(0);
    }
  }

  const run = await timedRun(batches, (b) => engine.transfer(o.target, b, { timeoutMs }), o);

  let verified = false;
  if (o.verify) {
    await corruptForSelfTest(o, local, (offset) => control.request(BENCH_CORRUPT, { offset }, 10_000));
    const mine = sha256Of(local);
    const theirs = await remoteDigest();
    if (mine !== theirs) throw new TransferError('TRANSFER_FAILED', `verification failed after the timed run: local sha256 ${mine}, target ${theirs}`);
    verified = true;
  }
  return benchResult(o.plugin, o, run, verified);
}
