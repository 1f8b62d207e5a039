import type { TransferEngine } from '../engine/transfer-engine.js';
import type { DeviceName } from '../spi/memory.js';

/**
 * Where one encoder-cache item can be pulled from: one entry of vLLM's
 * `ec_transfer_params` (`{mm_hash: {do_remote_encode, remote_host, remote_port}}`), plus
 * what a consumer needs to allocate the destination. It travels through the proxy as JSON,
 * which has no 64-bit integer, so the length is a decimal string.
 */
export interface ECItemParams {
  do_remote_encode: boolean;
  /** The producer's control endpoint (its engine's segment is `remote_host:remote_port`). */
  remote_host: string;
  remote_port: number;
  /** Bytes of the embedding (decimal u64). */
  length: string;
  /** Element type and shape of the embedding, so the consumer can view it. */
  dtype?: string;
  shape?: number[];
}

/** `{ mm_hash: params }`: returned by the producer, forwarded by the proxy to the prefill request. */
export type ECTransferParams = Record<string, ECItemParams>;

export interface ECConnectorOptions {
  role: 'producer' | 'consumer';
  engine?: TransferEngine;
  /** Producer: size of the registered transfer pool (bytes) and its device. */
  poolBytes?: number;
  poolDevice?: DeviceName;
  /** Control port (vLLM: VLLM_EC_MOONCAKE_BOOTSTRAP_PORT). */
  bootstrapPort?: number;
  loadTimeoutMs?: number;
}

/** Encoder side: stores each item's embedding in the transfer pool, keyed by content hash. */
export interface ECProducer {
  /** Copies an embedding into the pool (evicting old items if needed) and returns its params. */
  save(mmHash: string, embedding: ArrayBufferView, meta?: { dtype?: string; shape?: number[] }): Promise<ECItemParams>;
  has(mmHash: string): boolean;
  /** Params of saved items, for the response the proxy forwards. */
  transferParams(mmHashes: readonly string[]): ECTransferParams;
  close(): Promise<void>;
}

/** Outcome of loading: failed items are encoded locally by the caller. */
export interface ECLoadResult {
  loaded: string[];
  failed: { mmHash: string; error: Error }[];
}

/** Prefill side: pulls the items a request needs into its encoder cache. */
export interface ECConsumer {
  /** Starts pulling the given items; `destination` says where each lands locally (registered memory). */
  startLoad(params: ECTransferParams, destination: (mmHash: string, length: bigint) => { addr: bigint }): void;
  /** Resolves when every started item arrived or failed. Never rejects for an item failure. */
  waitForLoad(options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<ECLoadResult>;
  close(): Promise<void>;
}
