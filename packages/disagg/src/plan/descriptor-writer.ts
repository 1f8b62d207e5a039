import { OP_WRITE, type TransferBatch } from '@te/connector';

const TWO_32 = 4294967296;

/**
 * Fills a write batch's u64 arrays through 32-bit views, with plain number arithmetic.
 * Planning emits millions of descriptors for head-sliced layouts; BigInt arithmetic per
 * descriptor would cost an order of magnitude more. Addresses must stay below 2^53
 * (`checkAddressable`), which every user-space and CUDA UVA address does.
 */
export class DescriptorWriter {
  private readonly local: Uint32Array;
  private readonly remote: Uint32Array;
  private readonly length: Uint32Array;
  readonly batch: TransferBatch;
  count = 0;
  bytes = 0;

  constructor(readonly capacity: number) {
    this.batch = {
      opcodes: new Uint8Array(capacity).fill(OP_WRITE),
      localAddrs: new BigUint64Array(capacity),
      remoteAddrs: new BigUint64Array(capacity),
      lengths: new BigUint64Array(capacity),
    };
    this.local = new Uint32Array(this.batch.localAddrs.buffer);
    this.remote = new Uint32Array(this.batch.remoteAddrs.buffer);
    this.length = new Uint32Array(this.batch.lengths.buffer);
  }

  push(local: number, remote: number, length: number): void {
    const i = this.count++ * 2;
    const lh = Math.floor(local / TWO_32);
    this.local[i] = local - lh * TWO_32;
    this.local[i + 1] = lh;
    const rh = Math.floor(remote / TWO_32);
    this.remote[i] = remote - rh * TWO_32;
    this.remote[i + 1] = rh;
    const nh = Math.floor(length / TWO_32);
    this.length[i] = length - nh * TWO_32;
    this.length[i + 1] = nh;
    this.bytes += length;
  }

  /** The filled part as a batch (views over the same memory, no copy). */
  finish(): TransferBatch {
    const n = this.count;
    if (n === this.capacity) return this.batch;
    return {
      opcodes: this.batch.opcodes.subarray(0, n),
      localAddrs: this.batch.localAddrs.subarray(0, n),
      remoteAddrs: this.batch.remoteAddrs.subarray(0, n),
      lengths: this.batch.lengths.subarray(0, n),
    };
  }
}

/** Converts a u64 address or length to a number, refusing values that would lose bits. */
export function toSafeNumber(value: bigint, what: string): number {
  if (value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`${what} 0x${value.toString(16)} is beyond 2^53; the planner cannot address it exactly`);
  return Number(value);
}
