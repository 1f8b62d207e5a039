import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TransferError } from '@te/connector';
import { rawHttpAnswer } from '@te/testkit';
import { startBootstrapServer, type RankRegistration } from '../src/index.js';
import { BootstrapClient } from '../src/bootstrap/index.js';

/*
 * The bootstrap server over real HTTP: what a refused registration leaves behind.
 */
function rank(tp: number, tpRank: number): RankRegistration {
  return {
    attn_tp_size: tp,
    attn_tp_rank: tpRank,
    attn_dp_size: 1,
    attn_dp_rank: 0,
    pp_size: 1,
    pp_rank: 0,
    system_dp_size: 1,
    system_dp_rank: 0,
    endpoint: `127.0.0.1:${7000 + tpRank}`,
    page_size: 4,
    kv_cache_dtype: 'bf16',
    attention: 'mha',
    num_layers: 4,
    first_layer: 0,
    stage_layers: 4,
  };
}

/** Registers `body`; the reply's JSON body is read as `T` (a refusal's is `{ error }`). */
async function put<T = unknown>(port: number, body: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(`http://127.0.0.1:${port}/route`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as T };
}

test('a registration refused for its rank bounds does not fix the layout: later valid ranks register and the instance gets ready', async () => {
  const server = await startBootstrapServer({ host: '127.0.0.1', port: 0 });
  try {
    // A misconfigured rank (tp size 1, rank 3) is refused...
    const bad = await put<{ error: string }>(server.port, rank(1, 3));
    assert.is(bad.status, 400, JSON.stringify(bad.body));
    assert.match(bad.body.error, /outside the layout/);
    assert.is(server.expectedRanks, Infinity, 'a refused rank must not set the expected rank count');
    // ...and the real instance (tp 2) still registers, with no layout mismatch.
    for (const r of [0, 1]) {
      const ok = await put(server.port, rank(2, r));
      assert.is(ok.status, 200, JSON.stringify(ok.body));
    }
    assert.ok(server.ready);
    const info = (await (await fetch(`http://127.0.0.1:${server.port}/route`)).json()) as { attn_tp_size: number };
    assert.is(info.attn_tp_size, 2);
  } finally {
    await server.close();
  }
});

// Bootstrap clients use fetch, which refuses the Fetch standard's bad ports (10080 among
// them): a server there would never be reached, and its ranks would wait out bootstrapMs.
test('a bootstrap server is refused on a port fetch will not connect to, naming why', async () => {
  for (const port of [10080, 6000]) {
    const e = await startBootstrapServer({ host: '127.0.0.1', port }).then(
      (s) => s.close().then(() => undefined),
      (x: unknown) => x,
    );
    assert.ok(e instanceof TransferError, `port ${port}: ${String(e)}`);
    assert.is((e as TransferError).code, 'INVALID_CONFIG');
    assert.match((e as TransferError).message, new RegExp(`port ${port} is one fetch refuses to connect to`));
  }
});

// Before, listen() threw Node's ERR_SOCKET_BAD_PORT RangeError, without a code of te's.
test('a bootstrap server on a port that is not a port number is INVALID_CONFIG naming the value', async () => {
  for (const [port, shown] of [
    [-1, '-1'],
    [1.5, '1.5'],
    [70000, '70000'],
    [Number.NaN, 'NaN'],
    ['8998', '"8998"'],
  ] as const) {
    const e = await startBootstrapServer({ host: '127.0.0.1', port: port as number }).then(
      (s) => s.close().then(() => undefined),
      (x: unknown) => x,
    );
    assert.ok(e instanceof TransferError, `port ${shown}: ${String(e)}`);
    assert.is((e as TransferError).code, 'INVALID_CONFIG');
    assert.ok((e as TransferError).message.endsWith(`expected a port number from 0 to 65535, got ${shown}`), (e as TransferError).message);
  }
});

test("a client that cannot reach its server says why in the timeout (fetch's cause, not only 'fetch failed')", async () => {
  const client = new BootstrapClient('127.0.0.1:10080');
  const registration = rank(1, 0);
  const e = await client.register(registration, 300).then(
    () => undefined,
    (x: unknown) => x,
  );
  assert.ok(e instanceof TransferError, String(e));
  assert.is((e as TransferError).code, 'TIMEOUT');
  assert.match((e as TransferError).message, /last: bad port/);
});

// Before, the server destroyed the connection of an oversized body: its sender saw a reset
// ("fetch failed", ECONNRESET), never why.
test('a body over 64 KiB is answered 413 and the connection closed, also while the sender keeps sending', async () => {
  const server = await startBootstrapServer({ host: '127.0.0.1', port: 0 });
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/route`, { method: 'PUT', body: 'x'.repeat(200 * 1024) });
    assert.is(res.status, 413);
    assert.equal(await res.json(), { error: 'request body over 65536 bytes' });
    const chunk = Buffer.from(`4000\r\n${'a'.repeat(0x4000)}\r\n`);
    const endless = await rawHttpAnswer(server.port, 'PUT /route HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', () => chunk);
    assert.is(endless.statusLine, 'HTTP/1.1 413 Payload Too Large');
    assert.ok(endless.closedMs < 5_000, `closed after ${endless.closedMs} ms`);
    // The server still serves.
    assert.is((await fetch(`http://127.0.0.1:${server.port}/health`)).status, 200);
  } finally {
    await server.close();
  }
});

// Before, a request target the URL parser refuses was answered 500 (a TypeError's message).
test('a malformed request target is answered 400, not 500', async () => {
  const server = await startBootstrapServer({ host: '127.0.0.1', port: 0 });
  try {
    const answer = await rawHttpAnswer(server.port, 'GET //%%%/route HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.is(answer.statusLine, 'HTTP/1.1 400 Bad Request');
    assert.match(answer.body, /malformed request target/);
  } finally {
    await server.close();
  }
});

test.run();
