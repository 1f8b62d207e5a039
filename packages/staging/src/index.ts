export { StagingCopier, addressOf, stagingAvailability, defaultCopyThreads, type CopierOptions, type CopyRegion } from './copier.js';
export { CopyList, JOB_FIELDS, type StridedCopy } from './jobs.js';
export { loadStagingAddon, type StagingAddon, type NativeCopier } from './binding.js';
