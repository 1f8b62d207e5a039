import { TransferError, usableCpus } from '@te/connector';
import { PACKAGE_NAME, loadStagingAddon, type NativeCopier } from './binding.js';
import { JOB_FIELDS } from './jobs.js';

export interface CopierOptions {
  /** Copy threads per batch (default: half the usable CPUs, at least 1, at most 8: the transport's I/O threads need the rest). */
  threads?: number;
}

/** A region copies may touch, as numbers (addresses stay below 2^53). */
export interface CopyRegion {
  addr: number;
  length: number;
}

export function defaultCopyThreads(): number {
  return Math.max(1, Math.min(8, Math.floor(usableCpus() / 2)));
}

/**
 * Strided copies between host buffers on native threads, off the JS thread. Every copy is
 * checked against the regions set with `setRegions` before any byte of the batch moves.
 */
export class StagingCopier {
  private constructor(private readonly native: NativeCopier) {}

  static create(options: CopierOptions = {}): StagingCopier {
    const threads = options.threads ?? defaultCopyThreads();
    if (!Number.isInteger(threads) || threads < 1 || threads > 256)
      throw new TransferError('INVALID_ARGUMENT', `Expected \`threads\` to be an integer from 1 to 256, got ${threads}`);
    const addon = loadStagingAddon();
    return new StagingCopier(new addon.Copier(threads));
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

  /** Runs `jobs` (JOB_FIELDS numbers each); rejects with ADDRESS_OUT_OF_RANGE before any copy when one leaves the regions. */
  copy(jobs: Float64Array): Promise<void> {
    // The addon refuses any other type too, but a missing list would be a synchronous TypeError here.
    if (!(jobs instanceof Float64Array))
      return Promise.reject(new TransferError('INVALID_ARGUMENT', 'Expected `jobs` to be a Float64Array', { plugin: PACKAGE_NAME }));
    if (jobs.length % JOB_FIELDS !== 0)
      return Promise.reject(new TransferError('INVALID_ARGUMENT', `Expected ${JOB_FIELDS} numbers per copy, got ${jobs.length} numbers`));
    if (jobs.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      try {
        this.native.copy(jobs, (e) => (e ? reject(e) : resolve()));
      } catch (e) {
        reject(e);
      }
    });
  }
}

/** The address of a JS buffer's first byte (memory registered from JS is named by it). */
export function addressOf(buffer: ArrayBuffer | ArrayBufferView): bigint {
  return loadStagingAddon().addressOf(buffer);
}

/** Whether the native copier loads here; the reason when it does not. */
export function stagingAvailability(): { available: true } | { available: false; reason: string } {
  try {
    loadStagingAddon();
    return { available: true };
  } catch (e) {
    return { available: false, reason: (e as Error).message.split('\n')[0]! };
  }
}
