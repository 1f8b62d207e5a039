export { runBench, benchBytes, type BenchOptions, type BenchResult } from './bench/initiator.js';
export { startBenchTarget, type BenchTarget, type BenchTargetOptions } from './bench/target.js';
export { runDoctor, type DoctorReport, type PluginReport } from './commands/doctor.js';
export { knownVariables, unreadVariables, NATIVE_VARIABLES, type UnreadVariable } from './commands/environment-names.js';
export { percentile } from './bench/stats.js';
