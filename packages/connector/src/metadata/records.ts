/**
 * Small records kept beside the segment descriptors in a cluster store (etcd), for runtimes
 * that need to find each other without a service of their own (the PD bootstrap's rank
 * table). A record lives as long as the process that wrote it (it is written under the
 * process's lease) and is written again after the store lost it. Keys are relative to the
 * deployment's prefix.
 */
export interface MetadataRecords {
  /** Writes `value` under `key`; TransferError PEER_UNREACHABLE when the store is away (kept, and written when it returns). */
  put(key: string, value: Uint8Array): Promise<void>;
  /** Every record whose key starts with `prefix` (this process's and others'), within `timeoutMs`. */
  list(prefix: string, timeoutMs: number): Promise<Map<string, Uint8Array>>;
  delete(key: string): Promise<void>;
}
