/** Transfer counters kept when MC_TE_METRIC is on. */
export interface EngineMetrics {
  batches: number;
  requests: number;
  bytes: bigint;
  failedBatches: number;
  /** Per transport: batches routed through it. */
  byTransport: Record<string, number>;
}

export function emptyMetrics(): EngineMetrics {
  return { batches: 0, requests: 0, bytes: 0n, failedBatches: 0, byTransport: {} };
}
