import type { PrefillInfo, RankEndpoint, RankRegistration } from './schema.js';

/** The decode's own values the prefill layout is checked against. */
export interface DecodeDescription {
  page_size: number;
  kv_cache_dtype: string;
  attention: string;
  num_layers: number;
}

/**
 * Where the ranks of one prefill instance are registered and looked up: its bootstrap
 * HTTP server (BootstrapClient), or the cluster store (EtcdRankDirectory). Both apply the
 * rules of RankTable.
 */
export interface RankDirectory {
  /** The instance's address (`host:port` of its bootstrap server, or its name in the store). */
  readonly address: string;
  register(registration: RankRegistration, timeoutMs: number): Promise<void>;
  /**
   * One check that this rank's registration is still there with its endpoint (a restarted
   * bootstrap server lost it, an etcd record lapsed), registering it again if not.
   */
  ensureRegistered(registration: RankRegistration, timeoutMs: number): Promise<void>;
  prefillInfo(decode: DecodeDescription, timeoutMs: number): Promise<PrefillInfo>;
  /**
   * The instance's layout, not checked against any decode and not cached (one attempt): how
   * a refused decode finds the prefill ranks it must tell of the refusal.
   */
  layout(timeoutMs: number): Promise<PrefillInfo>;
  rankEndpoint(dp: number, tp: number, pp: number, timeoutMs: number): Promise<RankEndpoint>;
  /** Forgets cached answers (a prefill rank restarted and registered again). */
  forget(): void;
  /** Whether the instance is there (its server answers, or its ranks' records are alive). */
  health(timeoutMs: number): Promise<boolean>;
}
