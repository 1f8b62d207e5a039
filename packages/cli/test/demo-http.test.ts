import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { rawHttpAnswer } from '@te/testkit';
import { HttpError, postJson, serveJson } from '../src/demo/pipeline/http.js';
import { parseChat } from '../src/demo/pipeline/proxy.js';

/*
 * The demo's JSON-over-HTTP server (its proxy and workers) against requests a well-behaved
 * client never sends. Before: a body over the limit destroyed the connection, so its
 * sender saw a reset rather than the refusal; a request target the URL parser refuses
 * was answered 500 with a TypeError's text; a chat message of null was a 500 TypeError.
 * And its client (postJson) against a worker that answers without bound: before, it kept
 * the whole answer in memory, and a body that was not JSON surfaced as a bare SyntaxError.
 */
async function echoServer() {
  return serveJson({
    'POST /echo': async (body) => body,
    'GET /health': async () => ({ ok: true }),
  });
}

test('a body over 8 MiB is answered 413 and the connection closed, also while the sender keeps sending; the server still serves', async () => {
  const { server, port } = await echoServer();
  try {
    const chunk = Buffer.from(`10000\r\n${'a'.repeat(0x10000)}\r\n`);
    const endless = await rawHttpAnswer(port, 'POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', () => chunk);
    assert.is(endless.statusLine, 'HTTP/1.1 413 Payload Too Large');
    assert.match(endless.body, `{"error":{"message":"body over ${8 << 20} bytes","code":null}}`);
    assert.ok(endless.closedMs < 10_000, `closed after ${endless.closedMs} ms`);
    const echoed = await fetch(`http://127.0.0.1:${port}/echo`, { method: 'POST', body: JSON.stringify({ n: 1 }) });
    assert.equal(await echoed.json(), { n: 1 });
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('a malformed request target is answered 400, not 500', async () => {
  const { server, port } = await echoServer();
  try {
    const answer = await rawHttpAnswer(port, 'GET //%%%/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.is(answer.statusLine, 'HTTP/1.1 400 Bad Request');
    assert.match(answer.body, /malformed request target/);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('a chat request with a null message or a null content part is a 400 naming it', () => {
  const refused = (body: unknown): HttpError => {
    try {
      parseChat(body as never, 'chatcmpl-1');
    } catch (e) {
      return e as HttpError;
    }
    return assert.unreachable('accepted') as never;
  };
  for (const [body, message] of [
    [{ messages: [null] }, /Expected every message to be an object with `content`/],
    [{ messages: [{ content: [null] }] }, /unsupported content part null/],
    [{ messages: [{ content: 5 }] }, /Expected message content to be a string or an array of parts/],
  ] as const) {
    const e = refused(body);
    assert.ok(e instanceof HttpError, String(e));
    assert.is(e.status, 400);
    assert.match(e.message, message);
  }
  assert.equal(parseChat({ messages: [{ role: 'user', content: 'hi' }] }, 'c'), { id: 'c', text: 'hi', images: [] });
});

/** A server whose every answer `answer` writes, on loopback. */
async function rawServer(answer: (res: ServerResponse) => void) {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => answer(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
  const close = () => {
    server.closeAllConnections();
    server.close();
  };
  return { url, close };
}

async function rejection(p: Promise<unknown>): Promise<Error & { status?: number }> {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  return assert.unreachable('resolved') as never;
}

test('postJson stops reading an answer at 8 MiB: a valid JSON string of 9 MiB is refused, an endless answer too', async () => {
  const big = await rawServer((res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(`"${'a'.repeat(9 << 20)}"`);
  });
  const endless = await rawServer((res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const chunk = Buffer.alloc(1 << 16, 0x20);
    const pump = () => {
      while (!res.destroyed && res.write(chunk));
      if (!res.destroyed) res.once('drain', pump);
    };
    pump();
  });
  try {
    const e = await rejection(postJson(big.url, {}, 10_000));
    assert.match(e.message, `${big.url} answered more than ${8 << 20} bytes`);
    const started = performance.now();
    const f = await rejection(postJson(endless.url, {}, 10_000));
    assert.match(f.message, `${endless.url} answered more than ${8 << 20} bytes`);
    assert.ok(performance.now() - started < 5_000, `took ${performance.now() - started} ms`);
  } finally {
    big.close();
    endless.close();
  }
});

test('postJson: an answer that is not JSON is an error naming the URL, status and body', async () => {
  const html = await rawServer((res) => {
    res.writeHead(502, { 'content-type': 'text/html' });
    res.end('<html>bad gateway</html>');
  });
  try {
    const e = await rejection(postJson(html.url, {}, 10_000));
    assert.is(e.message, `${html.url} answered HTTP 502 with a body that is not JSON: "<html>bad gateway</html>"`);
    assert.is(e.status, 502);
  } finally {
    html.close();
  }
});

test.run();
