import type { TransferEngine } from '../engine/transfer-engine.js';
import type { DeviceName } from '../spi/memory.js';

/** Where one encoder-cache item can be pulled from (one entry of vLLM's `ec_transfer_params`). */
export interface ECItemParams {
  /** Producer's control host and port (its bootstrap endpoint). */
  remoteHost: string;
  remotePort: number;
  /** Segment holding the item and its location in the producer's transfer pool. */
  segment: string;
  /**
   * u64 address and length as decimal strings: these params travel through the proxy as
   * JSON, which has no 64-bit integer (a Number would lose bits above 2^53).
   */
  addr: string;
  length: string;
  /** Element type and shape of the embedding, so the consumer can allocate and view it. */
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
  save(mmHash: string, embedding: ArrayBufferView | { addr: bigint; length: bigint; device: DeviceName }, meta?: { dtype?: string; shape?: number[] }): Promise<ECItemParams>;
  has(mmHash: string): boolean;
  /** Params of saved items, for the response the proxy forwards. */
  transferParams(mmHashes: readonly string[]): ECTransferParams;
  /** Drops an item once every consumer that needed it loaded it. */
  release(mmHash: string): void;
  close(): Promise<void>;
}

/** Outcome of loading: failed items are encoded locally by the caller. */
export interface ECLoadResult {
  loaded: string[];
  failed: { mmHash: string; error: Error }[];
}

/** Prefill side: pulls the items a request needs into its encoder cache. */
export interface ECConsumer {
  /** Whether the item is already in the local encoder cache. */
  has(mmHash: string): boolean;
  /** Starts pulling the given items; `destination` says where each lands locally. */
  startLoad(params: ECTransferParams, destination: (mmHash: string, length: bigint) => { addr: bigint }): void;
  /** Resolves when every started item arrived or failed. Never rejects for an item failure. */
  waitForLoad(options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<ECLoadResult>;
  close(): Promise<void>;
}
