// What a `te bench` run is asked for and what it reports, shared by the engine path
// (initiator.ts), the Mooncake wire path (mooncake.ts) and the timed loop (timed-run.ts).
import type { TeConfig } from '@te/connector';

export interface BenchOptions {
  plugin: string;
  /** Package or file of a third-party plugin (config `modulePath`). */
  modulePath?: string;
  target: string;
  op: 'write' | 'read';
  blockSize: number;
  batchSize: number;
  concurrency: number;
  durationS: number;
  verify: boolean;
  timeoutMs?: number;
  bindAddress?: string;
  transportOptions?: Record<string, unknown>;
  /** The engine config from the commands' one config path; the fields above are ignored when given. */
  config?: TeConfig;
  /** Called about every 250 ms while timing. */
  onProgress?: (p: { elapsedS: number; bytesPerSecond: number; requestsPerSecond: number }) => void;
}

export interface BenchResult {
  plugin: string;
  op: 'write' | 'read';
  blockSize: number;
  batchSize: number;
  concurrency: number;
  durationS: number;
  bytes: number;
  requests: number;
  batches: number;
  bytesPerSecond: number;
  requestsPerSecond: number;
  p50Us: number;
  p99Us: number;
  /** True only when --verify ran and every byte matched. */
  verified: boolean;
}
