// The timed part of `te bench`, shared by the engine path (initiator.ts) and the Mooncake
// wire path (mooncake.ts): one worker per batch resubmits it until the duration is up, each
// batch's latency sampled, and the figures assembled into the run's result the same way.
import type { BenchOptions, BenchResult } from './options.js';
import { Samples, percentile } from './stats.js';

/** What the timed loop measured. */
export interface TimedRun {
  elapsedS: number;
  requests: number;
  batches: number;
  samples: Samples;
}

/** Each of `batches` resubmitted through `submit` by its own worker for `o.durationS` seconds. */
export async function timedRun<B>(
  batches: readonly B[],
  submit: (batch: B) => Promise<unknown>,
  o: Pick<BenchOptions, 'durationS' | 'batchSize' | 'blockSize' | 'onProgress'>,
): Promise<TimedRun> {
  const samples = new Samples();
  let requests = 0;
  let done = 0;
  const started = performance.now();
  const endAt = started + o.durationS * 1000;
  let lastReport = started;
  const worker = async (b: B): Promise<void> => {
    while (performance.now() < endAt) {
      const t0 = performance.now();
      await submit(b);
      const t1 = performance.now();
      samples.push((t1 - t0) * 1000);
      requests += o.batchSize;
      done++;
      if (o.onProgress && t1 - lastReport >= 250) {
        lastReport = t1;
        const s = (t1 - started) / 1000;
        o.onProgress({ elapsedS: s, bytesPerSecond: (requests * o.blockSize) / s, requestsPerSecond: requests / s });
      }
    }
  };
  await Promise.all(batches.map(worker));
  return { elapsedS: (performance.now() - started) / 1000, requests, batches: done, samples };
}

/** The run's result: `verified` is true only when the caller checked every byte the timed run moved. */
export function benchResult(plugin: string, o: BenchOptions, run: TimedRun, verified: boolean): BenchResult {
  const sorted = run.samples.sorted();
  const bytes = run.requests * o.blockSize;
  return {
    plugin,
    op: o.op,
    blockSize: o.blockSize,
    batchSize: o.batchSize,
    concurrency: o.concurrency,
    durationS: run.elapsedS,
    bytes,
    requests: run.requests,
    batches: run.batches,
    bytesPerSecond: bytes / run.elapsedS,
    requestsPerSecond: run.requests / run.elapsedS,
    p50Us: percentile(sorted, 50),
    p99Us: percentile(sorted, 99),
    verified,
  };
}
