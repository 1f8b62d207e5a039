const VLLM_ROLES: Record<string, string> = {
  kv_producer: 'producer',
  kv_consumer: 'consumer',
  kv_both: 'both',
  ec_producer: 'producer',
  ec_consumer: 'consumer',
  ec_both: 'both',
};

/** Maps vLLM's role spelling (`kv_producer`, `ec_consumer`, ...) to te's. */
export function normaliseRole(value: unknown): unknown {
  return typeof value === 'string' ? (VLLM_ROLES[value] ?? value) : value;
}
