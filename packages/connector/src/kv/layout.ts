/** How one engine instance is parallelised (SGLang's attention TP/DP, PP and system DP). */
export interface ParallelLayout {
  attnTpSize: number;
  attnTpRank: number;
  attnDpSize: number;
  attnDpRank: number;
  ppSize: number;
  ppRank: number;
  systemDpSize: number;
  systemDpRank: number;
}

/** What the router hands both prefill and decode for one request. */
export interface BootstrapInfo {
  /** The prefill instance's bootstrap server. */
  host: string;
  port: number;
  /** Random u63 identifying the request on both sides. */
  room: bigint;
  /** The prefill DP rank chosen by the router; `room % dpSize` when absent. */
  prefillDpRank?: number;
}

/** One group of equally shaped buffers: a pointer, a byte length and an item (page) length each. */
export interface BufferGroup {
  addrs: BigUint64Array;
  lengths: BigUint64Array;
  /** Bytes of one item (one page of one layer, or one aux slot). */
  itemLengths: BigUint64Array;
}

/** SGLang's KVArgs: the buffers a rank transfers from or into. */
export interface KVBuffers {
  /** MHA: `[K_0..K_{L-1}, V_0..V_{L-1}]` (2L entries); MLA: one buffer per layer (L entries). */
  kv: BufferGroup;
  attention: 'mha' | 'mla';
  numLayers: number;
  /** Tokens per page. */
  pageSize: number;
  kvCacheDtype: string;
  /** KV heads held by this rank and bytes per head per token (heterogeneous TP slicing). */
  kvHeadsPerRank?: number;
  headBytes?: number;
  /** Metadata buffers (first output token, ...), indexed by slot. */
  aux: BufferGroup;
  /** Mamba: one slot per request; SWA: page-indexed like KV. */
  state?: BufferGroup & { kind: 'mamba' | 'swa' };
  /** Where the KV lives; aux buffers are host memory. */
  device: 'cpu' | `cuda:${number}`;
}
