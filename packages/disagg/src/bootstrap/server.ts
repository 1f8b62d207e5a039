import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TransferError, type KVBootstrapServer } from '@te/connector';
import { HttpError, RankTable } from './rank-table.js';
import type { PrefillInfo, RankEndpoint } from './schema.js';
import { fetchBlockedPort } from './fetch-ports.js';
const MAX_BODY_BYTES = 64 * 1024;

export interface BootstrapServerOptions {
  /** Address to listen on (default 0.0.0.0: decode instances on other hosts query it). */
  host?: string;
  /** Port (SGLang's default is 8998; 0 picks a free one). */
  port?: number;
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
  private readonly table = new RankTable();
  private constructor(
    private readonly server: Server,
    readonly host: string,
    readonly port: number,
  ) {}

  static async start(options: BootstrapServerOptions = {}): Promise<BootstrapServer> {
    const server = createServer();
    server.headersTimeout = 10_000;
    server.requestTimeout = 10_000;
    server.keepAliveTimeout = 5_000;
    const host = options.host ?? '0.0.0.0';
    const blocked = fetchBlockedPort(options.port ?? 8998);
    if (blocked) throw new TransferError('INVALID_CONFIG', `Cannot start the bootstrap server on ${host}:${options.port ?? 8998}: ${blocked}`);
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
    return this.table.expectedRanks;
  }

  get ready(): boolean {
    return this.table.ready;
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const reply = (status: number, body: unknown): void => {
      const text = typeof body === 'string' ? body : JSON.stringify(body);
      const headers: Record<string, string> = { 'content-type': typeof body === 'string' ? 'text/plain' : 'application/json' };
      // The rest of an oversized body is not read: the connection ends after this answer.
      if (status === 413) headers.connection = 'close';
      res.writeHead(status, headers);
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
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://bootstrap');
    } catch {
      throw new HttpError(400, `malformed request target ${JSON.stringify((req.url ?? '').slice(0, 100))}`);
    }
    if (url.pathname === '/health' && req.method === 'GET') return 'OK';
    if (url.pathname !== '/route') throw new HttpError(404, `no route ${req.method} ${url.pathname}`);
    if (req.method === 'PUT') return this.register(await readJson(req));
    if (req.method === 'GET') return this.query(url);
    throw new HttpError(405, `${req.method} /route is not supported (PUT to register, GET to query)`);
  }

  private register(body: unknown): { registered: number; expected: number } {
    return this.table.register(body);
  }

  private query(url: URL): PrefillInfo | RankEndpoint {
    const dp = intParam(url, 'prefill_dp_rank');
    const tp = intParam(url, 'target_tp_rank');
    const pp = intParam(url, 'target_pp_rank');
    // A decode passes its own page size, dtype, attention and layer count: a mismatch is
    // refused here, not found as corrupt KV later.
    if ((dp ?? -1) < 0 && (tp ?? -1) < 0 && (pp ?? -1) < 0) return this.table.info((field) => url.searchParams.get(field));
    if (dp === undefined || tp === undefined || pp === undefined)
      throw new HttpError(400, 'prefill_dp_rank, target_tp_rank and target_pp_rank are all required for an endpoint query');
    return this.table.endpoint(dp, tp, pp);
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
      if (size > MAX_BODY_BYTES) return; // refused already: the rest is discarded, not kept
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        // Answered at once, while the sender may still be sending: destroying the socket here
        // instead would reach the client as a reset, not as this refusal. The server's
        // request timeout bounds a body that never ends.
        chunks.length = 0;
        reject(new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`));
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
