import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Socket } from 'node:net';
import { ControlClient, ControlServer, TransferError, decodeMessage, encodeMessage, isTransferError } from '../src/index.js';
import { MAX_IN_FLIGHT } from '../src/engine/control-client.js';
import { holdingHandler } from './fixtures/holding-handler.js';

test('codec keeps u64 values as bigint', () => {
  const v = decodeMessage<{ a: bigint; b: bigint; c: number }>(encodeMessage({ a: 0xffff_ffff_ffff_fff0n, b: 5n, c: 3 }));
  assert.is(v.a, 0xffff_ffff_ffff_fff0n);
  assert.is(v.b, 5n);
  assert.is(v.c, 3);
});

test('codec keeps typed arrays typed (page lists, address lists)', () => {
  const v = decodeMessage<{ pages: Uint32Array; addrs: BigUint64Array; st: Int32Array }>(
    encodeMessage({ pages: Uint32Array.from([1, 2, 0xffff_ffff]), addrs: BigUint64Array.from([0xffff_ffff_ffff_fff0n, 7n]), st: Int32Array.from([0, -2]) }),
  );
  assert.ok(v.pages instanceof Uint32Array);
  assert.equal([...v.pages], [1, 2, 0xffff_ffff]);
  assert.ok(v.addrs instanceof BigUint64Array);
  assert.equal([...v.addrs], [0xffff_ffff_ffff_fff0n, 7n]);
  assert.equal([...v.st], [0, -2]);
});

test('requests reach handlers by type; errors come back typed', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  assert.match(endpoint, /^127\.0\.0\.1:\d+$/);
  server.handle('echo', (body) => ({ got: body }));
  server.handle('fail', () => {
    throw new TransferError('POOL_EXHAUSTED', 'pool is full');
  });
  const client = new ControlClient(endpoint);
  try {
    assert.equal(await client.request('echo', { n: 1n }, 2000), { got: { n: 1n } });
    const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => client.request<{ got: number }>('echo', i, 2000)));
    assert.equal(
      replies.map((r) => r.got),
      Array.from({ length: 20 }, (_, i) => i),
      'replies matched to their requests',
    );
    for (const [type, code] of [
      ['fail', 'POOL_EXHAUSTED'],
      ['nope', 'INVALID_ARGUMENT'],
    ] as const) {
      try {
        await client.request(type, null, 2000);
        assert.unreachable();
      } catch (e) {
        assert.ok(isTransferError(e, code), String(e));
      }
    }
    assert.throws(() => server.handle('echo', () => 1), /already registered/);
  } finally {
    client.close();
    await server.close();
  }
});

// Before, a removed handler's type was answered like one never served: INVALID_ARGUMENT
// "unknown control message type", which reads as the sender's mistake.
test('a type whose handler was removed is answered PEER_UNREACHABLE; a stale remover leaves a newer handler in place', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  const client = new ControlClient(endpoint);
  const code = (type: string): Promise<string> =>
    client.request(type, null, 2000).then(
      () => 'OK',
      (e: unknown) => (isTransferError(e) ? `${e.code}: ${e.message}` : String(e)),
    );
  try {
    const remove = server.handle('te.kv.p.request', () => 1);
    assert.is(await code('te.kv.p.request'), 'OK');
    remove();
    const gone = await code('te.kv.p.request');
    assert.match(gone, /^PEER_UNREACHABLE: .*this process no longer serves "te.kv.p.request"/, gone);
    const never = await code('never.served');
    assert.match(never, /^INVALID_ARGUMENT: .*unknown control message type "never.served"/, never);
    // Served again (a new manager in the same process); the first remover must not take it away.
    server.handle('te.kv.p.request', () => 2);
    remove();
    assert.equal(await client.request('te.kv.p.request', null, 2000), 2);
  } finally {
    client.close();
    await server.close();
  }
});

test('a request to an endpoint nobody serves fails fast with PEER_UNREACHABLE', async () => {
  // Find a port nobody listens on.
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as { port: number }).port;
  await new Promise((r) => probe.close(r));
  const client = new ControlClient(`127.0.0.1:${port}`);
  const started = Date.now();
  try {
    await client.request('echo', null, 5_000);
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'PEER_UNREACHABLE'), String(e));
    assert.match((e as Error).message, /127\.0\.0\.1:\d+ refused the connection/);
    assert.ok(Date.now() - started < 2000);
  } finally {
    client.close();
  }
});

test('garbage sent to the control endpoint does not disturb other clients', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  server.handle('ping', () => 'pong');
  const { Dealer } = await import('zeromq');
  const rogue = new Dealer({ linger: 0 });
  rogue.connect(`tcp://${endpoint}`);
  await rogue.send(Buffer.from([0xc1, 0xff, 0x00]));
  await rogue.send(encodeMessage({ v: 1, id: 'x', type: 7 }));
  const client = new ControlClient(endpoint);
  try {
    assert.is(await client.request('ping', null, 2000), 'pong');
    const wrongVersion = new Dealer({ linger: 0, receiveTimeout: 2000 });
    wrongVersion.connect(`tcp://${endpoint}`);
    await wrongVersion.send(encodeMessage({ v: 99, id: 1, type: 'ping' }));
    const [reply] = await wrongVersion.receive();
    assert.is(decodeMessage<{ code: string }>(reply!).code, 'PROTOCOL_MISMATCH');
    wrongVersion.close();
  } finally {
    rogue.close();
    client.close();
    await server.close();
  }
});

/**
 * A TCP listener that accepts connections and never answers, as a live but stuck process's
 * control endpoint does. `connected(n)` resolves once n connections came, `count()` says how
 * many came; `close` drops them and stops listening (the process exits).
 */
async function silentPeer(): Promise<{ endpoint: string; connected: (n: number) => Promise<void>; count: () => number; close: () => Promise<void> }> {
  const held: Socket[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const server = createServer((sock) => {
    held.push(sock);
    for (const w of waiters) if (held.length >= w.n) w.resolve();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    endpoint: `127.0.0.1:${(server.address() as { port: number }).port}`,
    connected: (n) => (held.length >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }))),
    count: () => held.length,
    close: async () => {
      for (const sock of held) sock.destroy();
      if (server.listening) await new Promise((r) => server.close(r));
    },
  };
}

test('a peer that accepts but never answers is slow, not dead: TIMEOUT at the deadline', async () => {
  const silent = await silentPeer();
  const client = new ControlClient(silent.endpoint);
  const started = Date.now();
  try {
    const e = await client.request('echo', null, 400).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
    assert.ok(Date.now() - started >= 350);
  } finally {
    client.close();
    await silent.close();
  }
});

test('a peer that answered a moment ago and then died: a request to it fails with PEER_UNREACHABLE, not at its deadline', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  server.handle('ping', () => 'pong');
  const client = new ControlClient(endpoint);
  try {
    assert.is(await client.request('ping', null, 2000), 'pong');
    await server.close(); // the process exits: nothing listens there any more
    // Sent right after an answer (no probe for silence): probed once it has waited a while.
    const e = await client.request('ping', null, 30_000).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'PEER_UNREACHABLE'), String(e));
    assert.match((e as Error).message, /refused the connection/);
  } finally {
    client.close();
  }
});

test('a peer that dies while it is asked (alive when first probed): PEER_UNREACHABLE, not at its deadline', async () => {
  // The endpoint accepts connections and never answers, as a live but busy process does, so
  // the request's first probe finds it there; then the process exits. Without a second look
  // the request would wait out its whole deadline.
  const DEADLINE_MS = 6_000;
  const dying = await silentPeer();
  const client = new ControlClient(dying.endpoint);
  try {
    const asked = client.request('ping', null, DEADLINE_MS).then(
      () => undefined,
      (x: unknown) => x,
    );
    await dying.connected(2); // the client's socket and its probe
    await dying.close(); // nothing listens there any more
    const e = await asked;
    assert.ok(isTransferError(e, 'PEER_UNREACHABLE'), `${String(e)}: the deadline, not a probe, ended the request`);
    assert.match((e as Error).message, /refused the connection/);
  } finally {
    client.close();
    await dying.close();
  }
});

test('however many requests wait at a silent peer, the client probes it about once a second', async () => {
  // One look per client, not one per request: 1,000 requests made over 2 s, each waiting 3 s.
  const silent = await silentPeer();
  const client = new ControlClient(silent.endpoint);
  const started = Date.now();
  try {
    const asked: Promise<unknown>[] = [];
    for (let wave = 0; wave < 20; wave++) {
      for (let k = 0; k < 50; k++)
        asked.push(
          client.request('ping', null, 3_000).then(
            () => 'answered',
            (e: unknown) => (isTransferError(e) ? e.code : String(e)),
          ),
        );
      await new Promise((r) => setTimeout(r, 100));
    }
    const outcomes = await Promise.all(asked);
    assert.equal([...new Set(outcomes)], ['TIMEOUT'], 'a peer that accepts connections is slow, not dead');
    const seconds = (Date.now() - started) / 1000;
    const probes = silent.count() - 1; // the client's own zeromq connection is the first
    assert.ok(probes >= 1, 'the silent peer was looked at');
    // Probes at least a second apart: at most one at the start and one per whole second after.
    assert.ok(probes <= Math.floor(seconds) + 1, `${probes} probe connections in ${seconds.toFixed(1)} s`);
  } finally {
    client.close();
    await silent.close();
  }
});

test('an urgent request is not held up by the ordinary requests a peer holds; an ordinary one waits its turn', async () => {
  // A peer holding MAX_IN_FLIGHT ordinary requests (staging allocations waiting for space,
  // say) must still answer a liveness check or an abort at once.
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  const hold = holdingHandler();
  server.handle('hold', hold.handler);
  server.handle('ping', () => 'pong');
  const client = new ControlClient(endpoint);
  try {
    const holds = Array.from({ length: MAX_IN_FLIGHT + 10 }, () =>
      client.request('hold', null, 30_000).then(
        (v) => v,
        (e: unknown) => (isTransferError(e) ? e.code : String(e)),
      ),
    );
    await hold.whenHolding(MAX_IN_FLIGHT);
    assert.is(await client.request('ping', null, 2_000, { urgent: true }), 'pong', 'the urgent request went past the held ones');
    const ordinary = await client.request('ping', null, 500).then(
      () => 'answered',
      (e: unknown) => (isTransferError(e) ? e.code : String(e)),
    );
    assert.is(ordinary, 'TIMEOUT', 'an ordinary request waits until a place in flight frees');
    assert.is(hold.holding, MAX_IN_FLIGHT, 'no more than MAX_IN_FLIGHT ordinary requests were sent');
    // Released, the held ones are answered and the ten that waited are sent and answered too.
    hold.release();
    await hold.whenHolding(10);
    hold.release();
    assert.equal([...new Set(await Promise.all(holds))], ['done']);
  } finally {
    client.close();
    await server.close();
  }
});

test('a burst of requests larger than the sockets queue is answered in full, each with its own answer', async () => {
  // zeromq sockets take one send at a time and queue about a thousand messages per peer: a
  // burst past that must wait its turn in the client, and the replies in the server, not be
  // refused (EBUSY) or dropped.
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  server.handle('echo', async (body) => {
    await new Promise((r) => setTimeout(r, 20)); // every reply of the burst is due at once
    return body;
  });
  const client = new ControlClient(endpoint);
  try {
    const n = 3_000;
    const answers = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        client.request<{ i: number }>('echo', { i }, 10_000).then(
          (a) => a.i,
          (e: unknown) => `${(e as { code?: string }).code}: ${String(e)}`,
        ),
      ),
    );
    const wrong = answers.map((a, i) => [i, a] as const).filter(([i, a]) => a !== i);
    assert.is(wrong.length, 0, `${wrong.length} of ${n} requests not answered with their own body, e.g. ${JSON.stringify(wrong.slice(0, 3))}`);
  } finally {
    client.close();
    await server.close();
  }
});

test('a flood of requests to a peer that takes nothing in: bounded, and every request ends with a typed error', async () => {
  const silent = await silentPeer();
  const client = new ControlClient(silent.endpoint);
  try {
    const outcomes = await Promise.all(
      Array.from({ length: 20_000 }, (_, i) =>
        client.request('echo', { i }, 1_000).then(
          () => 'answered',
          (e: unknown) => (isTransferError(e) ? e.code : `untyped: ${String(e)}`),
        ),
      ),
    );
    const counts: Record<string, number> = {};
    for (const o of outcomes) counts[o] = (counts[o] ?? 0) + 1;
    assert.equal(Object.keys(counts).sort(), ['POOL_EXHAUSTED', 'TIMEOUT'], JSON.stringify(counts));
  } finally {
    client.close();
    await silent.close();
  }
});

test('what cannot be encoded: a request body is refused INVALID_ARGUMENT before it is sent, a reply comes back as an INTERNAL error', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  server.handle('odd', () => Symbol('not msgpack'));
  server.handle('echo', (body) => body);
  const client = new ControlClient(endpoint);
  const codeOf = (p: Promise<unknown>): Promise<string> =>
    p.then(
      () => 'answered',
      (e: unknown) => (isTransferError(e) ? `${e.code}: ${e.message}` : `untyped: ${String(e)}`),
    );
  try {
    assert.match(await codeOf(client.request('echo', { s: Symbol('x') }, 2_000)), /^INVALID_ARGUMENT: control request "echo" cannot be encoded/);
    assert.match(await codeOf(client.request('odd', null, 2_000)), /^INTERNAL: .*the reply cannot be encoded/);
    assert.is(client.busy, false, 'nothing left waiting');
    assert.equal(await client.request('echo', 7, 2_000), 7);
  } finally {
    client.close();
    await server.close();
  }
});

test.run();
