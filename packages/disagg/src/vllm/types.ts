/** One layer's cache as vLLM registers it: one region, K half then V half (`[2, numBlocks, ...]`). */
export interface LayerCache {
  name: string;
  addr: bigint;
  length: bigint;
}

/**
 * vLLM's `kv_transfer_params`, as they travel through the proxy (JSON: no u64, so the
 * room is a decimal string).
 */
export interface KVTransferParams {
  do_remote_prefill?: boolean;
  do_remote_decode?: boolean;
  /** The prefill instance's bootstrap server. */
  remote_host?: string | null;
  remote_port?: number | null;
  remote_engine_id?: string | null;
  /** Prefill-side block ids (informational: the decode sends its own destination). */
  remote_block_ids?: number[] | null;
  /** The room both sides use, as a decimal u63. */
  remote_request_id?: string | null;
  tp_size?: number;
}

/** The part of a vLLM `Request` the connector reads. */
export interface KVRequestView {
  requestId: string;
  promptTokens: number;
  kvTransferParams?: KVTransferParams | null;
  /** vLLM's finish reason; KV is handed off only for a length-capped prefill (max_tokens 1). */
  finishReason?: 'length' | 'stop' | 'abort' | null;
}

/** Scheduler → worker, once per step (vLLM's KVConnectorMetadata). */
export interface KVConnectorMeta {
  /** Decode: requests whose KV to pull into these blocks. */
  loads: { requestId: string; blockIds: number[]; params: KVTransferParams }[];
  /**
   * Prefill: requests whose blocks to send: finished ones, or (layerwise) the ones this
   * step computes, sent layer by layer during the forward pass.
   */
  sends: { requestId: string; blockIds: number[]; room: string; layerwise?: boolean }[];
  /**
   * Prefill: requests whose send started but that finished without handing off their KV
   * (layerwise, stopped or aborted): abort the send; `getFinished` reports it once settled.
   */
  aborts?: string[];
  /**
   * Prefill, layerwise: length-capped requests the scheduler finished (delay_free) whose
   * send started with an earlier forward pass: the worker lists each in `getFinished`'s
   * sending once the send ended, and not before (vLLM frees the blocks on that report).
   */
  finished?: string[];
}
