import { TransferError } from '@te/connector';
import { PACKAGE_NAME, loadStagingAddon, type NativeChecksummer } from './binding.js';
import { defaultCopyThreads, type CopyRegion } from './copier.js';

/**
 * A batch of checksums as one Float64Array, CHECKSUM_FIELDS numbers each: the CRC32C of the
 * bytes at addr + r·repStride + i·pitch, `width` at a time, for r < reps, for i < rows, in
 * that order. Addresses are numbers (below 2^53).
 */
export const CHECKSUM_FIELDS = 6;

/** Appends checksum jobs to a growing Float64Array without an object per job. */
export class ChecksumList {
  private data: Float64Array;
  count = 0;
  bytes = 0;

  constructor(capacity = 64) {
    this.data = new Float64Array(Math.max(1, capacity) * CHECKSUM_FIELDS);
  }

  /** One job (a contiguous range is `push(addr, length)`). Every job gets a CRC, an empty one 0. */
  push(addr: number, width: number, rows = 1, pitch = width, reps = 1, repStride = 0): void {
    if ((this.count + 1) * CHECKSUM_FIELDS > this.data.length) {
      const grown = new Float64Array(this.data.length * 2);
      grown.set(this.data);
      this.data = grown;
    }
    const d = this.data;
    let o = this.count * CHECKSUM_FIELDS;
    d[o++] = addr;
    d[o++] = width;
    d[o++] = rows;
    d[o++] = pitch;
    d[o++] = reps;
    d[o] = repStride;
    this.count++;
    this.bytes += width * rows * reps;
  }

  /** The filled part (a view, no copy). */
  finish(): Float64Array {
    return this.data.subarray(0, this.count * CHECKSUM_FIELDS);
  }
}

/**
 * CRC32C (Castagnoli) checksums of host memory on native threads, off the JS thread: the
 * CPU's crc32 instruction where it has one, else a table. Every job of a batch is checked
 * against the regions set with `setRegions` before any byte is read.
 */
export class Checksummer {
  private constructor(private readonly native: NativeChecksummer) {}

  static create(options: { threads?: number } = {}): Checksummer {
    const threads = options.threads ?? defaultCopyThreads();
    if (!Number.isInteger(threads) || threads < 1 || threads > 256)
      throw new TransferError('INVALID_ARGUMENT', `Expected \`threads\` to be an integer from 1 to 256, got ${threads}`);
    return new Checksummer(new (loadStagingAddon().Checksummer)(threads));
  }

  get threads(): number {
    return this.native.threads();
  }

  setRegions(regions: readonly CopyRegion[]): void {
    const flat = new Float64Array(regions.length * 2);
    regions.forEach((r, i) => {
      flat[2 * i] = r.addr;
      flat[2 * i + 1] = r.length;
    });
    this.native.setRegions(flat);
  }

  /** One CRC32C per job; rejects with ADDRESS_OUT_OF_RANGE before any byte is read when one leaves the regions. */
  checksum(jobs: Float64Array | ChecksumList): Promise<Uint32Array> {
    const flat = jobs instanceof ChecksumList ? jobs.finish() : jobs;
    if (!(flat instanceof Float64Array))
      return Promise.reject(new TransferError('INVALID_ARGUMENT', 'Expected `jobs` to be a Float64Array or a ChecksumList', { plugin: PACKAGE_NAME }));
    if (flat.length % CHECKSUM_FIELDS !== 0)
      return Promise.reject(new TransferError('INVALID_ARGUMENT', `Expected ${CHECKSUM_FIELDS} numbers per checksum, got ${flat.length} numbers`));
    if (flat.length === 0) return Promise.resolve(new Uint32Array(0));
    return new Promise((resolve, reject) => {
      try {
        this.native.checksum(flat, (e, crcs) => (e ? reject(e) : resolve(crcs)));
      } catch (e) {
        reject(e);
      }
    });
  }
}

/** Whether CRC32C runs on the CPU's crc32 instruction here (else a table-driven loop). */
export function crc32cHardware(): boolean {
  return loadStagingAddon().crc32cHardware();
}
