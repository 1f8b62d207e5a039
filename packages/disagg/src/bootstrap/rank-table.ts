import { TypeCompiler } from '@sinclair/typebox/compiler';
import { pairingMismatch } from '../shared/pairing.js';
import { firstSchemaError } from '../shared/schema-error.js';
import { RankRegistrationSchema, SHARED_FIELDS, type PrefillInfo, type RankEndpoint, type RankRegistration } from './schema.js';

const checkRegistration = TypeCompiler.Compile(RankRegistrationSchema);

/** A refusal with the HTTP status the bootstrap server answers it with. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** `dp_group` as SGLang keys it: the attention DP rank, or the system DP rank when there are several. */
export function dpGroupOf(r: RankRegistration): number {
  return r.system_dp_size === 1 ? r.attn_dp_rank : r.system_dp_rank;
}

export function dpSizeOf(r: RankRegistration): number {
  return r.system_dp_size === 1 ? r.attn_dp_size : r.system_dp_size;
}

/**
 * The ranks of one prefill instance and the rules they follow, whoever stores them (the
 * bootstrap HTTP server, or etcd): every rank agrees on the shared layout fields, the
 * instance is ready once every dp·tp·pp rank registered, and a decode whose page size,
 * KV dtype, attention kind or layer count differs is refused with both values named.
 */
export class RankTable {
  private readonly ranks = new Map<string, RankRegistration>();
  private shared: RankRegistration | undefined;

  /** Number of ranks a complete prefill instance registers. */
  get expectedRanks(): number {
    const s = this.shared;
    return s ? dpSizeOf(s) * s.attn_tp_size * s.pp_size : Infinity;
  }

  get ready(): boolean {
    return this.ranks.size >= this.expectedRanks;
  }

  get size(): number {
    return this.ranks.size;
  }

  register(body: unknown): { registered: number; expected: number } {
    if (!checkRegistration.Check(body)) {
      throw new HttpError(400, `malformed registration: ${firstSchemaError(checkRegistration, body)}`);
    }
    if (this.shared) {
      for (const field of SHARED_FIELDS) {
        if (this.shared[field] !== body[field]) {
          throw new HttpError(
            409,
            `rank tp=${body.attn_tp_rank} pp=${body.pp_rank} dp=${dpGroupOf(body)} registers ${field}=${String(body[field])}, but this prefill instance has ${field}=${String(this.shared[field])}`,
          );
        }
      }
    }
    if (body.attn_tp_rank >= body.attn_tp_size || body.pp_rank >= body.pp_size || dpGroupOf(body) >= dpSizeOf(body)) {
      throw new HttpError(
        400,
        `rank tp=${body.attn_tp_rank} pp=${body.pp_rank} dp=${dpGroupOf(body)} lies outside the layout tp=${body.attn_tp_size} pp=${body.pp_size} dp=${dpSizeOf(body)}`,
      );
    }
    // Only a registration that was accepted fixes the instance's layout: a refused one
    // must not make every later valid rank a mismatch.
    this.shared ??= body;
    // A restarted rank registers again with its new endpoint: the newest entry wins.
    this.ranks.set(rankKey(body), body);
    return { registered: this.ranks.size, expected: this.expectedRanks };
  }

  /** The prefill layout; `decode` holds the decode's own values (null: not given). */
  info(decode: (field: string) => string | null): PrefillInfo {
    const s = this.readyShared();
    const refused = pairingMismatch(decode, s);
    if (refused) throw new HttpError(409, refused);
    const info: PrefillInfo = {
      attn_tp_size: s.attn_tp_size,
      dp_size: dpSizeOf(s),
      pp_size: s.pp_size,
      page_size: s.page_size,
      kv_cache_dtype: s.kv_cache_dtype,
      attention: s.attention,
      num_layers: s.num_layers,
    };
    if (s.total_kv_heads !== undefined) info.total_kv_heads = s.total_kv_heads;
    return info;
  }

  endpoint(dp: number, tp: number, pp: number): RankEndpoint {
    this.readyShared();
    const rank = this.ranks.get(`${dp}/${tp}/${pp}`);
    if (!rank) throw new HttpError(404, `no prefill rank dp=${dp} tp=${tp} pp=${pp}`);
    return { endpoint: rank.endpoint, first_layer: rank.first_layer, stage_layers: rank.stage_layers };
  }

  private readyShared(): RankRegistration {
    if (!this.shared || !this.ready)
      throw new HttpError(
        503,
        `prefill instance not ready: ${this.shared ? `${this.ranks.size} of ${this.expectedRanks} ranks registered` : 'no rank registered yet'}`,
      );
    return this.shared;
  }
}

/** `dp/tp/pp` of a registration, as ranks are looked up. */
export function rankKey(r: RankRegistration): string {
  return `${dpGroupOf(r)}/${r.attn_tp_rank}/${r.pp_rank}`;
}
