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
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    // The rest of an oversized body is not read: the connection ends after this answer.
    if (status === 413) headers.connection = 'close';
    res.writeHead(status, headers);
    res.end(JSON.stringify(body));
  };
  try {
    const route = routes[`${req.method} ${pathOf(req)}`];
    if (!route) throw new HttpError(404, `no route ${req.method} ${req.url}`);
    const text = await readBody(req);
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

function pathOf(req: IncomingMessage): string {
  try {
    return new URL(req.url ?? '/', 'http://x').pathname;
  } catch {
    throw new HttpError(400, `malformed request target ${JSON.stringify((req.url ?? '').slice(0, 100))}`);
  }
}

/**
 * The body as text, at most MAX_BODY bytes. Past it the request is refused with 413 at once
 * and the rest is read and dropped, not kept: destroying the socket instead would reach the
 * sender as a reset, not as the refusal.
 */
function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      if (size > MAX_BODY) return;
      size += c.length;
      if (size > MAX_BODY) {
        chunks.length = 0;
        reject(new HttpError(413, `body over ${MAX_BODY} bytes`));
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/**
 * POSTs `body` as JSON and parses the answer, which may be at most MAX_BODY bytes: a worker
 * that answers more (or never stops) is cut off there rather than held in memory whole. An
 * answer that is not JSON is an error naming the URL and status, not a bare SyntaxError.
 */
export async function postJson<T>(url: string, body: unknown, timeoutMs = 60_000): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await readAnswer(res, url);
  let json: T & { error?: { message?: string; code?: string } };
  try {
    json = JSON.parse(text);
  } catch {
    throw Object.assign(new Error(`${url} answered HTTP ${res.status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 100))}`), {
      status: res.status,
    });
  }
  if (!res.ok) throw Object.assign(new Error(json?.error?.message ?? `HTTP ${res.status}`), { status: res.status, code: json?.error?.code });
  return json;
}

async function readAnswer(res: Response, url: string): Promise<string> {
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.length;
    if (size > MAX_BODY) {
      // Leaving the loop early cancels the stream, so the connection is dropped, not drained.
      throw Object.assign(new Error(`${url} answered more than ${MAX_BODY} bytes`), { status: res.status });
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
