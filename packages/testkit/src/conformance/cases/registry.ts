import type { ConformanceOptions, ConformancePair } from '../types.js';

/** What a group of cases registers itself with. */
export interface CaseRegistry {
  /** Registers a case, or registers it skipped with the reason its options give. */
  it(caseName: string, body: (pair: ConformancePair) => Promise<void>): void;
  /** The same for a case that needs `pair.stall` and `pair.resume`. */
  needsStall(caseName: string, body: (pair: ConformancePair) => Promise<void>): void;
  options: ConformanceOptions;
  /** Largest single write the suite tries. */
  maxBytes: number;
  /** Size of the write sent to a stalled peer. */
  stallBytes: number;
}
