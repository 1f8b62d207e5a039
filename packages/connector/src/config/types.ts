/** Which side of a transfer this process plays (vLLM's kv_producer / kv_consumer / kv_both). */
export type ConnectorRole = 'producer' | 'consumer' | 'both';

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'silent';

export interface MetadataConfig {
  /**
   * `p2p`: descriptors fetched from peers themselves (embedded, no service). `etcd`:
   * descriptors kept in etcd under a lease the live process renews.
   */
  type: 'p2p' | 'etcd';
  /** Control endpoint port; 0 picks a free one. */
  port: number;
  /** etcd members (`host:port`), with `type: 'etcd'`. */
  endpoints: string[];
  /** Key prefix (a cluster id): deployments sharing one etcd use different prefixes. */
  prefix: string;
  /** Lease time-to-live in seconds: a dead process's descriptor is gone this long after it died. */
  leaseTtlS: number;
}

export interface TimeoutConfig {
  /** Default deadline of a batch when the caller gives none. */
  transferMs: number;
  /** Fetching a peer's descriptor. */
  handshakeMs: number;
  /** Connecting a transport to a peer. */
  connectMs: number;
  /**
   * One transport's registerMemory, unregisterMemory, allocateMemory or freeMemory: past it
   * the call fails with TIMEOUT and the engine's next registration goes on. Generous, since
   * pinning a large region can take minutes.
   */
  registerMs: number;
}

/** The one config object of te, mirroring vLLM's KVTransferConfig / ECTransferConfig. */
export interface TeConfig {
  /** Transport plugin name (`mooncake-tcp`), or any name when `modulePath` is set. */
  connector: string;
  role: ConnectorRole;
  /** Package name or file path of a third-party plugin; wins over the built-in table. */
  modulePath?: string;
  /** Further transports the engine holds besides `connector` (e.g. TCP for host-memory aux data). */
  transports: string[];
  /** Options per plugin name, validated by each plugin's schema. */
  transportOptions: Record<string, Record<string, unknown>>;
  metadata: MetadataConfig;
  /** Address to bind and advertise (MC_TCP_BIND_ADDRESS). */
  bindAddress: string;
  timeouts: TimeoutConfig;
  /** MC_FORCE_TCP: every request goes over a TCP-class transport. */
  forceTcp: boolean;
  /** MC_INTRANODE_NVLINK: add the intra-node NVLink transport. */
  intranodeNvlink: boolean;
  /** MC_FORCE_MNNVL: add the multi-node NVLink transport. */
  forceMnnvl: boolean;
  /** MC_TE_METRIC: collect transfer metrics. */
  metrics: boolean;
  /** TE_METRIC_INTERVAL_S: seconds between the lines `metrics` logs. */
  metricIntervalS: number;
  /** MC_LOG_LEVEL. */
  logLevel: LogLevel;
  /** Free-form settings for the connector runtime (kv_connector_extra_config). */
  extra: Record<string, unknown>;
  /**
   * TE_SECRET: a secret every process of the deployment shares. When set, the control plane
   * only talks to holders of it (CURVE, encrypted) and every transport that can
   * authenticate its connections does (mooncake-tcp). See docs/security.md.
   */
  secret?: string;
}

export type TeConfigInput = Partial<Omit<TeConfig, 'metadata' | 'timeouts'>> & {
  /** An object, or a connection string: `p2p` or `etcd://host:2379[,host2:2379]`. */
  metadata?: Partial<MetadataConfig> | string;
  timeouts?: Partial<TimeoutConfig>;
};

export const DEFAULT_CONFIG: Readonly<Omit<TeConfig, 'connector'>> = Object.freeze({
  role: 'both',
  transports: [],
  transportOptions: {},
  metadata: { type: 'p2p' as const, port: 0, endpoints: [], prefix: 'te', leaseTtlS: 10 },
  bindAddress: '127.0.0.1',
  timeouts: { transferMs: 30_000, handshakeMs: 5_000, connectMs: 5_000, registerMs: 600_000 },
  forceTcp: false,
  intranodeNvlink: false,
  forceMnnvl: false,
  metrics: false,
  metricIntervalS: 5,
  logLevel: 'warn',
  extra: {},
});
