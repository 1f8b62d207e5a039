export { StagingCopier, addressOf, stagingAvailability, defaultCopyThreads, type CopierOptions, type CopyRegion } from './copier.js';
export { CopyList, JOB_FIELDS, type StridedCopy } from './jobs.js';
export { Checksummer, ChecksumList, CHECKSUM_FIELDS, crc32cHardware } from './checksummer.js';
export { loadStagingAddon, type StagingAddon, type NativeCopier, type NativeChecksummer } from './binding.js';
