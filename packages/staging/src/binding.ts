/**
 * The native surface of the staging copier: the one place that declares what the addon
 * exports and loads it. Arguments are validated in TypeScript before they get here.
 */
import { fileURLToPath } from 'node:url';
import { loadNativeAddon } from '@te/connector';

export const PACKAGE_NAME = '@te/staging';

export interface NativeCopier {
  /** Memory later copies may touch: (base, length) pairs; replaces the previous set. */
  setRegions(regions: Float64Array): void;
  /**
   * Runs the copies (9 numbers each: src, dst, width, rows, srcPitch, dstPitch, reps,
   * srcRepStride, dstRepStride) on the copy threads. Throws TransferError
   * ADDRESS_OUT_OF_RANGE / INVALID_ARGUMENT before any byte moves; `done` is called on the
   * JS thread once every byte was copied.
   */
  copy(jobs: Float64Array, done: (error: Error | null) => void): void;
  /** Threads copying one batch (the caller's included). */
  threads(): number;
}

export interface NativeChecksummer {
  /** Memory later checksums may read: (base, length) pairs; replaces the previous set. */
  setRegions(regions: Float64Array): void;
  /**
   * CRC32C of each job (6 numbers each: addr, width, rows, pitch, reps, repStride: the bytes
   * of the strided walk in order) on the checksum threads. Throws TransferError
   * ADDRESS_OUT_OF_RANGE / INVALID_ARGUMENT before any byte is read; `done` is called on the
   * JS thread with one CRC per job.
   */
  checksum(jobs: Float64Array, done: (error: Error | null, crcs: Uint32Array) => void): void;
  threads(): number;
}

export interface StagingAddon {
  Copier: new (threads: number) => NativeCopier;
  Checksummer: new (threads: number) => NativeChecksummer;
  /** Whether CRC32C runs on the CPU's instruction here (else a table). */
  crc32cHardware(): boolean;
  /** The address of a JS buffer's first byte. */
  addressOf(buffer: ArrayBuffer | ArrayBufferView): bigint;
}

let cached: StagingAddon | undefined;

/** Loads the addon once; throws TransferError PLUGIN_LOAD_FAILED (with what was tried) when it is not built. */
export function loadStagingAddon(): StagingAddon {
  cached ??= loadNativeAddon<StagingAddon>({
    plugin: PACKAGE_NAME,
    file: 'te_staging.node',
    packageRoot: fileURLToPath(new URL('..', import.meta.url)),
    envVar: 'TE_STAGING_ADDON',
    solutions: ['build it: `npm run build -w @te/staging` (needs cmake >= 3.18 and a C++17 compiler)'],
  });
  return cached;
}
