// What a plugin hands the conformance suite: how to build a pair of engines, and which cases to leave out.
import type { TransferEngine, TransportCapabilities } from '@te/connector';
import type { TargetMemory } from './target.js';

/** Two engines that can reach each other, built by the plugin under test. */
export interface ConformancePair {
  initiator: TransferEngine;
  /** The target's segment name. */
  target: string;
  targetMemory: TargetMemory;
  /** Makes the target stop serving (SIGSTOP, a never-complete fault); needed by the abort/deadline cases. */
  stall?(): Promise<void>;
  resume?(): Promise<void>;
  close(): Promise<void>;
}

export interface ConformanceOptions {
  /** Name shown in the suite title. */
  name: string;
  capabilities: TransportCapabilities;
  createPair(): Promise<ConformancePair>;
  /**
   * Another initiator that reaches the pair's target, built as the pair's initiator is (for
   * the case with two initiators at one target; without it that case is skipped, with the
   * reason). The suite closes it.
   */
  createInitiator?(): Promise<TransferEngine>;
  /** Cases this plugin does not run, each with the reason (printed, never silent). */
  exclude?: Record<string, string>;
  /** Run only these cases (while debugging one); the others are registered as skipped. */
  only?: string[];
  /** Largest single write the suite tries (default 1 MiB). */
  maxBytes?: number;
  /** Size of the write sent to a stalled peer in the abort and deadline cases (default 32 MiB). */
  stallBytes?: number;
}
