import { TypeCompiler } from '@sinclair/typebox/compiler';
import { TransferError } from '@te/connector';
import { firstSchemaError } from '../shared/schema-error.js';
import type { DecodeDescription, RankDirectory } from './directory.js';
import { RankEndpointSchema, type PrefillInfo, type RankEndpoint, type RankRegistration } from './schema.js';
import { dpGroupOf } from './rank-table.js';

const RETRY_MS = 100;
/** The largest answer read from a bootstrap server (its answers are a few hundred bytes). */
const MAX_ANSWER_BYTES = 1 << 20;

interface Answer {
  status: number;
  body: unknown;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function call(url: string, init: RequestInit, timeoutMs: number): Promise<Answer> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(Math.max(1, timeoutMs)) });
  const text = await boundedText(res, url);
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // plain text (GET /health)
  }
  return { status: res.status, body };
}

/**
 * The answer's body, refused past MAX_ANSWER_BYTES: every answer of the protocol is a few
 * hundred bytes, and the server is a peer (or whatever listens at its address), so its
 * body is not read into memory without a bound.
 */
async function boundedText(res: Response, url: string): Promise<string> {
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_ANSWER_BYTES) {
      await reader.cancel().catch(() => undefined);
      throw new TransferError(
        'PROTOCOL_MISMATCH',
        `${url} answered more than ${MAX_ANSWER_BYTES} bytes (status ${res.status}); a bootstrap server's answers are small: is something else listening at that address?`,
      );
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

const checkEndpoint = TypeCompiler.Compile(RankEndpointSchema);

function errorText(body: unknown): string {
  return typeof body === 'object' && body !== null && 'error' in body ? String((body as { error: unknown }).error) : String(body).slice(0, 300);
}

/**
 * Talks to one prefill instance's bootstrap server, retrying what may still succeed
 * (unreachable, not ready) until a deadline, failing at once on what never will
 * (a layout mismatch, a malformed request).
 */
export class BootstrapClient implements RankDirectory {
  private info: Promise<PrefillInfo> | undefined;
  private readonly endpoints = new Map<string, Promise<RankEndpoint>>();

  constructor(readonly address: string) {}

  private url(path: string): string {
    return `http://${this.address}${path}`;
  }

  private async retrying(what: string, deadline: number, attempt: () => Promise<Answer>, onAnswer: (a: Answer) => 'retry' | unknown): Promise<unknown> {
    let last = 'no answer';
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0)
        throw new TransferError('TIMEOUT', `bootstrap server ${this.address}: ${what} did not succeed in time (last: ${last})`, {
          details: { bootstrap: this.address },
        });
      try {
        const a = await attempt();
        const out = onAnswer(a);
        if (out !== 'retry') return out;
        last = `${a.status} ${errorText(a.body)}`;
      } catch (e) {
        if (e instanceof TransferError) throw e;
        const cause = (e as { cause?: { code?: string; message?: string } }).cause;
        last = (e as Error).message === 'This operation was aborted' ? 'request timed out' : (cause?.code ?? cause?.message ?? (e as Error).message);
      }
      await sleep(Math.min(RETRY_MS, Math.max(1, deadline - Date.now())));
    }
  }

  /** A prefill rank registers itself (PUT /route), retrying until the server is up. */
  async register(registration: RankRegistration, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    await this.retrying(
      'rank registration',
      deadline,
      () =>
        call(this.url('/route'), { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(registration) }, deadline - Date.now()),
      (a) => {
        if (a.status === 200) return a.body;
        if (a.status === 409) throw new TransferError('LAYOUT_MISMATCH', `bootstrap server ${this.address} refused the rank: ${errorText(a.body)}`);
        if (a.status === 400) throw new TransferError('INVALID_ARGUMENT', `bootstrap server ${this.address} refused the rank: ${errorText(a.body)}`);
        return 'retry';
      },
    );
  }

  async ensureRegistered(registration: RankRegistration, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const q = `prefill_dp_rank=${dpGroupOf(registration)}&target_tp_rank=${registration.attn_tp_rank}&target_pp_rank=${registration.pp_rank}`;
    const a = await call(this.url(`/route?${q}`), {}, timeoutMs);
    // 503 also answers while another rank is missing: registering again then is harmless.
    if (a.status === 200 && checkEndpoint.Check(a.body) && a.body.endpoint === registration.endpoint) return;
    const put = await call(
      this.url('/route'),
      { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(registration) },
      deadline - Date.now(),
    );
    if (put.status === 409) throw new TransferError('LAYOUT_MISMATCH', `bootstrap server ${this.address} refused the rank: ${errorText(put.body)}`);
  }

  /** The prefill layout, once every rank registered; the decode's own values are checked by the server. */
  prefillInfo(decode: DecodeDescription, timeoutMs: number): Promise<PrefillInfo> {
    if (!this.info) {
      const deadline = Date.now() + timeoutMs;
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(decode)) q.set(k, String(v));
      this.info = this.retrying(
        'layout query',
        deadline,
        () => call(this.url(`/route?${q}`), {}, deadline - Date.now()),
        (a) => {
          if (a.status === 200) return a.body;
          if (a.status === 409) throw new TransferError('LAYOUT_MISMATCH', `bootstrap server ${this.address} refused this decode: ${errorText(a.body)}`);
          return 'retry';
        },
      ) as Promise<PrefillInfo>;
      // A failed lookup is not cached: the next request asks again.
      this.info.catch(() => (this.info = undefined));
    }
    return this.info;
  }

  async layout(timeoutMs: number): Promise<PrefillInfo> {
    const a = await call(this.url('/route'), {}, timeoutMs);
    if (a.status !== 200)
      throw new TransferError('PEER_UNREACHABLE', `bootstrap server ${this.address}: layout query answered ${a.status} ${errorText(a.body)}`, {
        details: { bootstrap: this.address },
      });
    return a.body as PrefillInfo;
  }

  rankEndpoint(dp: number, tp: number, pp: number, timeoutMs: number): Promise<RankEndpoint> {
    const key = `${dp}/${tp}/${pp}`;
    let p = this.endpoints.get(key);
    if (!p) {
      const deadline = Date.now() + timeoutMs;
      p = this.retrying(
        `endpoint query dp=${dp} tp=${tp} pp=${pp}`,
        deadline,
        () => call(this.url(`/route?prefill_dp_rank=${dp}&target_tp_rank=${tp}&target_pp_rank=${pp}`), {}, deadline - Date.now()),
        (a) => {
          if (a.status !== 200) return 'retry';
          if (checkEndpoint.Check(a.body)) return a.body;
          // A peer's answer, checked before its endpoint becomes a segment name and a control address.
          throw new TransferError(
            'INVALID_ARGUMENT',
            `bootstrap server ${this.address} answered a malformed endpoint for dp=${dp} tp=${tp} pp=${pp}: ${firstSchemaError(checkEndpoint, a.body)}`,
            { details: { bootstrap: this.address } },
          );
        },
      ) as Promise<RankEndpoint>;
      this.endpoints.set(key, p);
      p.catch(() => this.endpoints.delete(key));
    }
    return p;
  }

  /** Forgets cached endpoints (a prefill rank restarted and registered again). */
  forget(): void {
    this.info = undefined;
    this.endpoints.clear();
  }

  async health(timeoutMs: number): Promise<boolean> {
    try {
      const a = await call(this.url('/health'), {}, timeoutMs);
      return a.status === 200;
    } catch {
      return false;
    }
  }
}
