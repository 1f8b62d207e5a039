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

/** One settled batch, as metric observers see it. */
export interface BatchRecord {
  segment: string;
  /** Transports that carried a part of the batch. */
  transports: string[];
  requests: number;
  /** Bytes that landed (0 for a failed batch). */
  bytes: bigint;
  /** Undefined on success; the TransferError code otherwise. */
  code: string | undefined;
  seconds: number;
}
