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
  private lastLocalEnd = -1;
  private lastRemoteEnd = -1;
  private lastLength = 0;

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

  /**
   * Emits `rows` descriptors whose addresses advance by fixed strides, without per-row
   * division: the low halves carry into the high halves by hand. Lengths are set for a
   * whole range at once with `fillLengths` (the head-sliced path emits millions of them).
   */
  pushStrided(local: number, remote: number, localStride: number, remoteStride: number, rows: number): void {
    let lh = Math.floor(local / TWO_32);
    let ll = local - lh * TWO_32;
    let rh = Math.floor(remote / TWO_32);
    let rl = remote - rh * TWO_32;
    const L = this.local;
    const R = this.remote;
    let i = this.count * 2;
    for (let t = 0; t < rows; t++) {
      L[i] = ll;
      L[i + 1] = lh;
      R[i] = rl;
      R[i + 1] = rh;
      i += 2;
      ll += localStride;
      if (ll >= TWO_32) {
        ll -= TWO_32;
        lh++;
      }
      rl += remoteStride;
      if (rl >= TWO_32) {
        rl -= TWO_32;
        rh++;
      }
    }
    this.count += rows;
  }

  /** Sets lengths [from, to) to one value: one write, then doubling copies (memcpy speed). */
  fillLengths(length: number, from: number, to: number): void {
    if (to <= from) return;
    const lengths = this.batch.lengths;
    lengths[from] = BigInt(length);
    for (let filled = 1; from + filled < to; filled *= 2) lengths.copyWithin(from + filled, from, Math.min(from + filled, to - filled));
    this.bytes += length * (to - from);
  }

  /**
   * Like push, but extends the previous descriptor when this one continues it on both
   * sides (consecutive pages of a run, rows of a contiguous slice).
   */
  pushMerged(local: number, remote: number, length: number): void {
    if (this.count > 0 && local === this.lastLocalEnd && remote === this.lastRemoteEnd) {
      const i = (this.count - 1) * 2;
      const len = this.lastLength + length;
      const nh = Math.floor(len / TWO_32);
      this.length[i] = len - nh * TWO_32;
      this.length[i + 1] = nh;
      this.lastLength = len;
      this.bytes += length;
    } else {
      this.push(local, remote, length);
      this.lastLength = length;
    }
    this.lastLocalEnd = local + length;
    this.lastRemoteEnd = remote + length;
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
  if (value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER))
    throw new RangeError(`${what} 0x${value.toString(16)} is beyond 2^53; the planner cannot address it exactly`);
  return Number(value);
}
