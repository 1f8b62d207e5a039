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
  /** Layers this rank holds (its PP stage's layers). */
  numLayers: number;
  /** Absolute index of this rank's first layer (PP stage start; default 0). */
  firstLayer?: number;
  /** Layers of the whole model (default `numLayers`); both sides must agree. */
  totalLayers?: number;
  /** Tokens per page. A decode's may be a whole multiple of the prefill's (pages map by token range). */
  pageSize: number;
  /**
   * How one page of one layer is laid out: `NHD` `[token][head][bytes]` (default) or `HND`
   * `[head][token][bytes]`. With HND a head slice is contiguous per page, so heterogeneous
   * TP moves it in one piece; the sides may differ (the slice is re-laid out in staging).
   */
  pageLayout?: 'NHD' | 'HND';
  kvCacheDtype: string;
  /** KV heads held by this rank and bytes per head per token (heterogeneous TP slicing). */
  kvHeadsPerRank?: number;
  headBytes?: number;
  /** KV heads of the whole model (MHA/GQA; needed when prefill and decode TP differ). */
  totalKvHeads?: number;
  /** Metadata buffers (first output token, ...), indexed by slot. */
  aux: BufferGroup;
  /**
   * Mamba: one slot per request; SWA: page-indexed like KV. `totalUnits` is the size of
   * the TP-sharded dimension of a Mamba state item (heads), needed when TP differs.
   */
  state?: BufferGroup & { kind: 'mamba' | 'swa'; totalUnits?: number };
  /** Where the KV lives; aux buffers are host memory. */
  device: 'cpu' | `cuda:${number}`;
}
