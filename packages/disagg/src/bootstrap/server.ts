import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { TransferError, type KVBootstrapServer } from '@te/connector';
import { RankRegistrationSchema, SHARED_FIELDS, type PrefillInfo, type RankEndpoint, type RankRegistration } from './schema.js';

const checkRegistration = TypeCompiler.Compile(RankRegistrationSchema);
const MAX_BODY_BYTES = 64 * 1024;

export interface BootstrapServerOptions {
  /** Address to listen on (default 0.0.0.0: decode instances on other hosts query it). */
  host?: string;
  /** Port (SGLang's default is 8998; 0 picks a free one). */
  port?: number;
}

class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** `dp_group` as SGLang keys it: the attention DP rank, or the system DP rank when there are several. */
function dpGroupOf(r: RankRegistration): number {
  return r.system_dp_size === 1 ? r.attn_dp_rank : r.system_dp_rank;
}

function dpSizeOf(r: RankRegistration): number {
  return r.system_dp_size === 1 ? r.attn_dp_size : r.system_dp_size;
}

function intParam(url: URL, name: string): number | undefined {
  const raw = url.searchParams.get(name);
  if (raw === null || raw === '') return undefined;
  if (!/^-?\d+$/.test(raw)) throw new HttpError(400, `query parameter ${name} must be an integer, got "${raw.slice(0, 40)}"`);
  return Number(raw);
}

/**
 * One per prefill instance: its ranks register here, and decode ranks learn the prefill
 * layout and the endpoint of each rank they need. Not ready (503) until every dp·tp·pp
 * rank registered; a rank or decode whose page size, KV dtype, attention kind or layer
 * count differs is refused (409) with both values named.
 */
export class BootstrapServer implements KVBootstrapServer {
  private readonly ranks = new Map<string, RankRegistration>();
  private shared: RankRegistration | undefined;
  private constructor(private readonly server: Server, readonly host: string, readonly port: number) {}

  static async start(options: BootstrapServerOptions = {}): Promise<BootstrapServer> {
    const server = createServer();
    server.headersTimeout = 10_000;
    server.requestTimeout = 10_000;
    server.keepAliveTimeout = 5_000;
    const host = options.host ?? '0.0.0.0';
    await new Promise<void>((resolve, reject) => {
      server.once('error', (cause: NodeJS.ErrnoException) =>
        reject(new TransferError('INVALID_CONFIG', `Cannot start the bootstrap server on ${host}:${options.port ?? 8998}: ${cause.message}`, { cause })),
      );
      server.listen(options.port ?? 8998, host, () => resolve());
    });
    const self = new BootstrapServer(server, host, (server.address() as AddressInfo).port);
    server.on('request', (req, res) => self.serve(req, res));
    return self;
  }

  /** Number of ranks a complete prefill instance registers. */
  get expectedRanks(): number {
    const s = this.shared;
    return s ? dpSizeOf(s) * s.attn_tp_size * s.pp_size : Infinity;
  }

  get ready(): boolean {
    return this.ranks.size >= this.expectedRanks;
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const reply = (status: number, body: unknown): void => {
      const text = typeof body === 'string' ? body : JSON.stringify(body);
      res.writeHead(status, { 'content-type': typeof body === 'string' ? 'text/plain' : 'application/json' });
      res.end(text);
    };
    this.route(req)
      .then((body) => reply(200, body))
      .catch((e: unknown) => {
        if (e instanceof HttpError) reply(e.status, { error: e.message });
        else reply(500, { error: (e as Error).message });
      });
  }

  private async route(req: IncomingMessage): Promise<unknown> {
    const url = new URL(req.url ?? '/', 'http://bootstrap');
    if (url.pathname === '/health' && req.method === 'GET') return 'OK';
    if (url.pathname !== '/route') throw new HttpError(404, `no route ${req.method} ${url.pathname}`);
    if (req.method === 'PUT') return this.register(await readJson(req));
    if (req.method === 'GET') return this.query(url);
    throw new HttpError(405, `${req.method} /route is not supported (PUT to register, GET to query)`);
  }

  private register(body: unknown): { registered: number; expected: number } {
    if (!checkRegistration.Check(body)) {
      const first = checkRegistration.Errors(body).First();
      throw new HttpError(400, `malformed registration: ${first ? `${first.path || '(body)'} ${first.message}` : 'does not match the schema'}`);
    }
    if (this.shared) {
      for (const field of SHARED_FIELDS) {
        if (this.shared[field] !== body[field]) {
          throw new HttpError(409, `rank tp=${body.attn_tp_rank} pp=${body.pp_rank} dp=${dpGroupOf(body)} registers ${field}=${String(body[field])}, but this prefill instance has ${field}=${String(this.shared[field])}`);
        }
      }
    } else {
      this.shared = body;
    }
    if (body.attn_tp_rank >= body.attn_tp_size || body.pp_rank >= body.pp_size || dpGroupOf(body) >= dpSizeOf(body)) {
      throw new HttpError(400, `rank tp=${body.attn_tp_rank} pp=${body.pp_rank} dp=${dpGroupOf(body)} lies outside the layout tp=${body.attn_tp_size} pp=${body.pp_size} dp=${dpSizeOf(body)}`);
    }
    // A restarted rank registers again with its new endpoint: the newest entry wins.
    this.ranks.set(`${dpGroupOf(body)}/${body.attn_tp_rank}/${body.pp_rank}`, body);
    return { registered: this.ranks.size, expected: this.expectedRanks };
  }

  private query(url: URL): PrefillInfo | RankEndpoint {
    const dp = intParam(url, 'prefill_dp_rank');
    const tp = intParam(url, 'target_tp_rank');
    const pp = intParam(url, 'target_pp_rank');
    if (!this.shared || !this.ready) throw new HttpError(503, `prefill instance not ready: ${this.ranks.size} of ${Number.isFinite(this.expectedRanks) ? this.expectedRanks : '?'} ranks registered`);
    const s = this.shared;
    if ((dp ?? -1) < 0 && (tp ?? -1) < 0 && (pp ?? -1) < 0) {
      this.checkDecode(url, s);
      const info: PrefillInfo = { attn_tp_size: s.attn_tp_size, dp_size: dpSizeOf(s), pp_size: s.pp_size, page_size: s.page_size, kv_cache_dtype: s.kv_cache_dtype, attention: s.attention, num_layers: s.num_layers };
      if (s.total_kv_heads !== undefined) info.total_kv_heads = s.total_kv_heads;
      return info;
    }
    if (dp === undefined || tp === undefined || pp === undefined) throw new HttpError(400, 'prefill_dp_rank, target_tp_rank and target_pp_rank are all required for an endpoint query');
    const rank = this.ranks.get(`${dp}/${tp}/${pp}`);
    if (!rank) throw new HttpError(404, `no prefill rank dp=${dp} tp=${tp} pp=${pp}`);
    return { endpoint: rank.endpoint, first_layer: rank.first_layer, stage_layers: rank.stage_layers };
  }

  /** A decode passes its own page size, dtype, attention and layer count: refuse a mismatch here, not as corrupt KV later. */
  private checkDecode(url: URL, s: RankRegistration): void {
    const mine: Record<string, string | number> = { page_size: s.page_size, kv_cache_dtype: s.kv_cache_dtype, attention: s.attention, num_layers: s.num_layers };
    for (const [field, value] of Object.entries(mine)) {
      const theirs = url.searchParams.get(field);
      if (theirs !== null && theirs !== String(value)) throw new HttpError(409, `${field} mismatch: decode has ${field}=${theirs.slice(0, 64)}, prefill has ${field}=${value}`);
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch {
        reject(new HttpError(400, 'request body is not JSON'));
      }
    });
    req.on('error', reject);
  });
}

/** Starts a prefill instance's bootstrap server. */
export function startBootstrapServer(options: BootstrapServerOptions = {}): Promise<BootstrapServer> {
  return BootstrapServer.start(options);
}
