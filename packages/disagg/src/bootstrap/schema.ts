import { Type, type Static } from '@sinclair/typebox';

/*
 * The bootstrap server's HTTP API (JSON; SGLang's field names, so routers and operators
 * can query it with curl):
 *   PUT /route            a prefill rank registers (RankRegistration)
 *   GET /route            the prefill layout (PrefillInfo); 503 until every rank registered;
 *                         with page_size / kv_cache_dtype / num_layers / attention: 409 on mismatch
 *   GET /route?prefill_dp_rank=&target_tp_rank=&target_pp_rank=   one rank's endpoint (RankEndpoint)
 *   GET /health           "OK"
 */
const Int = (min = 0, max = 1 << 30) => Type.Integer({ minimum: min, maximum: max });

export const RankRegistrationSchema = Type.Object({
  attn_tp_size: Int(1, 4096),
  attn_tp_rank: Int(0, 4095),
  attn_dp_size: Int(1, 4096),
  attn_dp_rank: Int(0, 4095),
  pp_size: Int(1, 1024),
  pp_rank: Int(0, 1023),
  system_dp_size: Int(1, 4096),
  system_dp_rank: Int(0, 4095),
  /** The rank's control endpoint (`host:port`), where decode ranks send PD messages. */
  endpoint: Type.String({ minLength: 3, maxLength: 300 }),
  page_size: Int(1),
  kv_cache_dtype: Type.String({ minLength: 1, maxLength: 64 }),
  attention: Type.Union([Type.Literal('mha'), Type.Literal('mla')]),
  num_layers: Int(1),
  first_layer: Int(0),
  stage_layers: Int(1),
  total_kv_heads: Type.Optional(Int(1)),
});
export type RankRegistration = Static<typeof RankRegistrationSchema>;

/** Fields every rank of one prefill instance must agree on, and a decode must match. */
export const SHARED_FIELDS = [
  'attn_tp_size',
  'attn_dp_size',
  'pp_size',
  'system_dp_size',
  'page_size',
  'kv_cache_dtype',
  'attention',
  'num_layers',
  'total_kv_heads',
] as const;

/** What GET /route answers; a decode checks it (the server is a peer), with the registration's bounds. */
export const PrefillInfoSchema = Type.Object({
  attn_tp_size: Int(1, 4096),
  dp_size: Int(1, 4096),
  pp_size: Int(1, 1024),
  page_size: Int(1),
  kv_cache_dtype: Type.String({ minLength: 1, maxLength: 64 }),
  attention: Type.Union([Type.Literal('mha'), Type.Literal('mla')]),
  num_layers: Int(1),
  total_kv_heads: Type.Optional(Int(1)),
});
export type PrefillInfo = Static<typeof PrefillInfoSchema>;

/** What GET /route?prefill_dp_rank=… answers; a decode checks it too, with the registration's bounds. */
export const RankEndpointSchema = Type.Object({
  endpoint: RankRegistrationSchema.properties.endpoint,
  first_layer: Int(0),
  stage_layers: Int(1),
});
export type RankEndpoint = Static<typeof RankEndpointSchema>;
