import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

const MAX_BODY = 8 << 20;

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a parsed JSON body; each route checks the fields it reads
export type Route = (body: any, req: IncomingMessage) => Promise<unknown>;

/** A JSON-over-HTTP server (on loopback unless `host` says otherwise): routes by "METHOD /path"; errors answer with {error}. */
export async function serveJson(routes: Record<string, Route>, port = 0, host = '127.0.0.1'): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => void handle(routes, req, res));
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(port, host, () => resolve()));
  return { server, port: (server.address() as AddressInfo).port };
}

async function handle(routes: Record<string, Route>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const reply = (status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  try {
    const route = routes[`${req.method} ${new URL(req.url ?? '/', 'http://x').pathname}`];
    if (!route) throw new HttpError(404, `no route ${req.method} ${req.url}`);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > MAX_BODY) throw new HttpError(413, 'body too large');
      chunks.push(c as Buffer);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    let body: unknown = undefined;
    if (text) {
      try {
        body = JSON.parse(text);
      } catch {
        throw new HttpError(400, 'body is not JSON');
      }
    }
    reply(200, await route(body, req));
  } catch (e) {
    const status = e instanceof HttpError ? e.status : 500;
    reply(status, { error: { message: (e as Error).message, code: (e as { code?: string }).code ?? null } });
  }
}

export async function postJson<T>(url: string, body: unknown, timeoutMs = 60_000): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const json = (await res.json()) as T & { error?: { message: string; code?: string } };
  if (!res.ok) throw Object.assign(new Error(json.error?.message ?? `HTTP ${res.status}`), { status: res.status, code: json.error?.code });
  return json;
}
