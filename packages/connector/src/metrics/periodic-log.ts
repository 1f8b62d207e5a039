import type { BatchRecord } from '../engine/metrics.js';
import { TransferError } from '../errors/transfer-error.js';
import { MAX_METRIC_INTERVAL_S } from '../config/schema.js';

const MIN_INTERVAL_S = 0.01;

/**
 * What the periodic line reads of an engine. The engine starts the line itself (with
 * MC_TE_METRIC), so this names only the two calls it needs, not the engine's module.
 */
export interface ObservedEngine {
  observeBatches(observer: (r: BatchRecord) => void): () => void;
  inFlight(): Record<string, number>;
}

/**
 * MC_TE_METRIC's periodic line, as Mooncake users know it: throughput over the interval,
 * batches, failures and latency, one line every `intervalS` seconds (TE_METRIC_INTERVAL_S,
 * default 5). Stops with the engine.
 */
export function startMetricLog(engine: ObservedEngine, log: (line: string) => void, intervalS = 5): () => void {
  if (typeof engine?.observeBatches !== 'function' || typeof engine.inFlight !== 'function')
    throw new TransferError('INVALID_ARGUMENT', 'startMetricLog needs an engine (observeBatches and inFlight)');
  if (typeof log !== 'function') throw new TransferError('INVALID_ARGUMENT', `Expected startMetricLog's log to be a function, got ${typeof log}`);
  // Below 10 ms the line would be written at every turn of the event loop; past a day, a
  // timer's limit makes Node.js fire it every millisecond instead.
  if (typeof intervalS !== 'number' || !(intervalS >= MIN_INTERVAL_S && intervalS <= MAX_METRIC_INTERVAL_S))
    throw new TransferError(
      'INVALID_ARGUMENT',
      `Expected the metric interval to be seconds from ${MIN_INTERVAL_S} to ${MAX_METRIC_INTERVAL_S}, got ${String(intervalS)}`,
    );
  let bytes = 0n;
  let batches = 0;
  let failed = 0;
  let latencies: number[] = [];
  const stop = engine.observeBatches((r) => {
    batches++;
    if (r.code !== undefined) failed++;
    bytes += r.bytes;
    if (latencies.length < 100_000) latencies.push(r.seconds);
  });
  const timer = setInterval(() => {
    latencies.sort((a, b) => a - b);
    const pct = (q: number): string =>
      latencies.length ? `${(latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))]! * 1e6).toFixed(0)} us` : '-';
    log(
      `[Metric] Transfer Engine throughput: ${(Number(bytes) / intervalS / 1e6).toFixed(2)} MB/s over ${intervalS} s, ${batches} batches, ${failed} failed, latency p50 ${pct(0.5)} p99 ${pct(0.99)}, in flight ${JSON.stringify(engine.inFlight())}`,
    );
    bytes = 0n;
    batches = 0;
    failed = 0;
    latencies = [];
  }, intervalS * 1000);
  timer.unref();
  return () => {
    clearInterval(timer);
    stop();
  };
}
