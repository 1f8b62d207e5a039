// What the engine knows about its batches: counters (when `metrics` is on), batches in
// flight per transport, and observers called after each batch settles (exporters).
import type { TransferBatch } from '../spi/batch.js';
import { checkListener } from './listener-check.js';
import type { Log } from './logger.js';
import { emptyMetrics, type BatchRecord, type EngineMetrics } from './metrics.js';
import type { Route } from './router.js';

export class BatchStats {
  private readonly counters = emptyMetrics();
  private readonly observers = new Set<(r: BatchRecord) => void>();
  private readonly inFlightNow = new Map<string, number>();

  constructor(
    private readonly enabled: boolean,
    private readonly log: Log,
  ) {}

  /** Counts a settled batch into the counters (only when `metrics` is on). */
  count(routes: readonly Route[], batch: TransferBatch, ok: boolean): void {
    if (!this.enabled) return;
    const c = this.counters;
    c.batches++;
    c.requests += batch.opcodes.length;
    if (ok) for (let i = 0; i < batch.lengths.length; i++) c.bytes += batch.lengths[i]!;
    else c.failedBatches++;
    for (const r of routes) c.byTransport[r.via.name] = (c.byTransport[r.via.name] ?? 0) + 1;
  }

  /** A batch started on these routes' transports. */
  started(routes: readonly Route[]): void {
    for (let i = 0; i < routes.length; i++) {
      const name = routes[i]!.via.name;
      this.inFlightNow.set(name, (this.inFlightNow.get(name) ?? 0) + 1);
    }
  }

  /**
   * A batch that `started` at `startedAt` (performance.now()) settled, with `code` when it
   * failed; observers get its record. Nothing is built for a batch no one observes.
   */
  settled(routes: readonly Route[], segment: string, requests: number, code: string | undefined, bytes: bigint, startedAt: number): void {
    for (let i = 0; i < routes.length; i++) {
      const name = routes[i]!.via.name;
      this.inFlightNow.set(name, (this.inFlightNow.get(name) ?? 1) - 1);
    }
    if (this.observers.size === 0) return;
    const seconds = (performance.now() - startedAt) / 1000;
    this.emit({ segment, transports: routes.map((r) => r.via.name), requests, bytes, code, seconds });
  }

  /** Calls `observer` after every batch settles (metrics exporters use it); returns the unsubscribe. */
  observe(observer: (r: BatchRecord) => void): () => void {
    checkListener(observer, "observeBatches' observer");
    this.observers.add(observer);
    return () => this.observers.delete(observer);
  }

  /** Batches in flight now, by transport. */
  inFlight(): Record<string, number> {
    return Object.fromEntries(this.inFlightNow);
  }

  /** Hands a settled batch to every observer. */
  private emit(r: BatchRecord): void {
    for (const o of this.observers) {
      try {
        o(r);
      } catch (e) {
        this.log('error', `a batch observer threw: ${(e as Error).message}`);
      }
    }
  }

  metrics(): EngineMetrics {
    return structuredClone(this.counters);
  }
}
