/**
 * The environment variables the runtime reads, beside `@te/connector`'s (which configure the
 * engine, `ENVIRONMENT_VARIABLES`). `te doctor` checks the names set against both lists, so a
 * misspelt one is named instead of being silently ignored.
 */
export const RUNTIME_ENVIRONMENT_VARIABLES = {
  TE_KV_CHECKSUMS: 'KV and EC checksums: a boolean (1, true, yes, on) for the automatic mode, pages for per-page CRC32C',
  TE_LAYERWISE: 'layerwise KV transfer on or off (a boolean), where the connector option does not say; decides over SGLANG_MOONCAKE_ASYNC_KV',
  SGLANG_MOONCAKE_ASYNC_KV: "SGLang's spelling of TE_LAYERWISE",
  TE_PD_BOOTSTRAP_STORE: 'where prefill ranks publish themselves: http (default) or etcd',
  TE_PD_STAGING: 'the staging path of heterogeneous TP: 0 turns it off',
  TE_PD_STAGING_BYTES: 'prefill: bytes of staging memory for gathers (default 64 MiB)',
  TE_PD_STAGING_CHUNK_BYTES: 'largest piece of staging one write takes (default 8 MiB)',
  TE_PD_STAGING_RING_BYTES: 'decode: bytes of the staging ring offered to prefill ranks (default 64 MiB; 0: none)',
  TE_PD_TRANSPORT_GATHER: '0: slices a transport could gather go through the staging copier instead',
  TE_PD_TRANSPORT_SCATTER: "0: slices a transport could scatter go through the decode's ring instead",
  MC_LOG_LEVEL: "debug (or trace): the runtime's debug lines (layerwise and staging fallbacks) on stderr",
} as const;
