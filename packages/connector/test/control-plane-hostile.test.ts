import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Dealer } from 'zeromq';
import { ControlClient, ControlServer, createTransferEngine, decodeMessage, encodeMessage, isTransferError } from '../src/index.js';
import { MAX_RUNNING_HANDLERS, MAX_RUNNING_PER_CLIENT } from '../src/engine/control-plane.js';
import { holdingHandler } from './fixtures/holding-handler.js';

/*
 * A hostile or careless peer on the control plane: malformed envelopes, hostile field
 * types, non-msgpack bytes, oversized messages, handlers that throw odd values. The
 * process must survive (no unhandled rejection), answer what it can correlate, and keep
 * serving well-formed requests.
 */
async function withServer(run: (server: ControlServer, endpoint: string, raw: Dealer) => Promise<void>): Promise<void> {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  server.handle('echo', (body) => ({ got: body }));
  const raw = new Dealer({ linger: 0 });
  raw.connect(`tcp://${endpoint}`);
  const rejections: unknown[] = [];
  const onRejection = (e: unknown): void => void rejections.push(e);
  process.on('unhandledRejection', onRejection);
  try {
    await run(server, endpoint, raw);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(rejections.map(String), [], 'no unhandled rejection escaped the control server');
  } finally {
    process.off('unhandledRejection', onRejection);
    raw.close();
    await server.close();
  }
}

// One reader per socket (zeromq allows one receive at a time); replies queue up here.
const inboxes = new WeakMap<Dealer, { queue: unknown[]; wake?: () => void }>();

function inbox(raw: Dealer): { queue: unknown[]; wake?: () => void } {
  let box = inboxes.get(raw);
  if (!box) {
    const b: { queue: unknown[]; wake?: () => void } = { queue: [] };
    inboxes.set(raw, (box = b));
    void (async () => {
      try {
        for await (const [payload] of raw) {
          b.queue.push(decodeMessage(payload!));
          b.wake?.();
        }
      } catch {
        // closed
      }
    })();
  }
  return box;
}

/** The reply envelope of a refused request, as these tests read it. */
interface ErrorReply {
  id: number;
  ok: boolean;
  code: string;
  message: string;
}

/** The next decoded reply on `raw`, or 'no reply' when none came within `timeoutMs`. */
async function reply(raw: Dealer, timeoutMs = 2_000): Promise<unknown> {
  const box = inbox(raw);
  const end = Date.now() + timeoutMs;
  while (box.queue.length === 0) {
    const left = end - Date.now();
    if (left <= 0) return 'no reply';
    await new Promise<void>((r) => {
      const t = setTimeout(r, left);
      box.wake = () => (clearTimeout(t), r());
    });
  }
  return box.queue.shift();
}

async function stillServes(endpoint: string): Promise<void> {
  const client = new ControlClient(endpoint);
  try {
    assert.equal(await client.request('echo', { n: 1 }, 2_000), { got: { n: 1 } });
  } finally {
    client.close();
  }
}

test('a hostile field type ({v: {toString: 0}}) is answered INVALID_ARGUMENT, not a crash', async () => {
  await withServer(async (_s, endpoint, raw) => {
    await raw.send(encodeMessage({ v: { toString: 0 }, id: 1, type: 'x' }));
    const r = (await reply(raw)) as ErrorReply;
    assert.is(r.id, 1);
    assert.is(r.ok, false);
    assert.is(r.code, 'INVALID_ARGUMENT');
    assert.match(r.message, /malformed control message/);
    await stillServes(endpoint);
  });
});

test('malformed envelopes: a reply when the id can be read, silence otherwise; never a crash', async () => {
  await withServer(async (_s, endpoint, raw) => {
    // [envelope, the id it must be answered with (none: it cannot be read, so silence), label]
    const cases: [unknown, number | undefined, string][] = [
      [null, undefined, 'null'],
      [7, undefined, '7'],
      ['x', undefined, '"x"'],
      [[], undefined, '[]'],
      [{ v: 1, id: 'seven', type: 'echo' }, undefined, 'a string id'],
      [{ v: 1, id: -1, type: 'echo' }, undefined, 'a negative id'],
      [{ v: 1, id: 1.5, type: 'echo' }, undefined, 'a fractional id'],
      [{ v: 1, type: 'echo' }, undefined, 'no id'],
      [{ id: 2 }, 2, '{id: 2}'],
      [{ v: 1, id: 3 }, 3, 'no type'],
      [{ v: 1, id: 4, type: 5 }, 4, 'a numeric type'],
      [{ v: 1, id: 5, type: { toString: 0 } }, 5, 'an object type'],
      [{ v: 1n, id: 6, type: 'echo' }, 6, 'a bigint version'],
    ];
    for (const [bad, id, label] of cases) {
      await raw.send(encodeMessage(bad));
      if (id === undefined) {
        assert.is(await reply(raw, 300), 'no reply', `${label}: no id to answer to, so no reply`);
        continue;
      }
      const r = (await reply(raw)) as ErrorReply;
      assert.is.not(r, 'no reply', `${label}: the id can be read, so a reply is due`);
      assert.is(r.id, id, `${label}: the reply answers this envelope`);
      assert.is(r.ok, false, `${label}: ${JSON.stringify(r)}`);
      assert.is(r.code, 'INVALID_ARGUMENT', label);
      assert.match(r.message, /malformed control message/, label);
    }
    await raw.send(Buffer.from([0xc1, 0xff, 0x00])); // not msgpack
    assert.is(await reply(raw, 300), 'no reply');
    await stillServes(endpoint);
  });
});

test('a long type is refused without being echoed; an oversized message is dropped', async () => {
  await withServer(async (_s, endpoint, raw) => {
    await raw.send(encodeMessage({ v: 1, id: 9, type: 'x'.repeat(100_000) }));
    const r = (await reply(raw)) as ErrorReply;
    assert.is(r.code, 'INVALID_ARGUMENT');
    assert.ok(r.message.length < 300, `reply of ${r.message.length} characters`);
    const big = new Dealer({ linger: 0 });
    big.connect(`tcp://${endpoint}`);
    await big.send(encodeMessage({ v: 1, id: 10, type: 'echo', body: Buffer.alloc(20 << 20) })); // over the 16 MiB cap
    assert.is(await reply(big, 500), 'no reply');
    big.close();
    await stillServes(endpoint);
  });
});

test('handlers that throw odd values (a number, a code object, a rejected promise) give INTERNAL or their code', async () => {
  await withServer(async (server, endpoint) => {
    server.handle('num', () => {
      throw 42;
    });
    server.handle('weird', () => {
      throw { code: { toString: 0 }, message: { toString: 0 } };
    });
    server.handle('rej', () => Promise.reject(new Error('boom')));
    const client = new ControlClient(endpoint);
    try {
      for (const type of ['num', 'weird', 'rej']) {
        const e = await client.request(type, null, 2_000).then(
          () => undefined,
          (x: unknown) => x,
        );
        assert.ok(isTransferError(e, 'INTERNAL'), `${type}: ${String(e)}`);
      }
    } finally {
      client.close();
    }
    await stillServes(endpoint);
  });
});

/** Runs `body` and returns the unhandled rejections seen meanwhile (each would end a process without a listener). */
async function collectRejections(body: () => Promise<void>): Promise<unknown[]> {
  const rejections: unknown[] = [];
  const onRejection = (e: unknown): void => void rejections.push(e);
  process.on('unhandledRejection', onRejection);
  try {
    await body();
    await new Promise((r) => setTimeout(r, 200));
  } finally {
    process.off('unhandledRejection', onRejection);
  }
  return rejections;
}

test('a descriptor request whose `from` is not a segment name is refused; unregistering afterwards is no crash', async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1', timeouts: { handshakeMs: 2_000 } }, { env: {} });
  // A well-behaved peer that fetched the descriptor: it is told of the unregistration.
  const good = new ControlServer();
  const goodEndpoint = await good.bind('127.0.0.1', 0);
  const revoked: unknown[] = [];
  good.handle('te.segment.revoke', (body) => (revoked.push(body), { dropped: false }));
  const hostile = new ControlClient(engine.segmentName);
  try {
    const rejections = await collectRejections(async () => {
      const mem = await engine.allocateMemory(4096, { remoteAccess: true });
      for (const from of ['127.0.0.1:1x', '127.0.0.1:99999', '127.0.0.1:', 'no-port', 42, { toString: 0 }, `${'a'.repeat(400)}:80`]) {
        const e = await hostile.request('te.descriptor.get', { from }, 2_000).then(
          () => 'answered with the descriptor',
          (x: unknown) => x,
        );
        assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `from ${JSON.stringify(from)}: ${String(e)}`);
      }
      // Older peers send no `from`; a valid one is remembered.
      const d = await hostile.request<{ name: string }>('te.descriptor.get', null, 2_000);
      assert.is(d.name, engine.segmentName);
      assert.is((await hostile.request<{ name: string }>('te.descriptor.get', { from: goodEndpoint }, 2_000)).name, engine.segmentName);
      await engine.freeMemory(mem); // revokes the remote-access region: subscribers are dialled
    });
    assert.equal(rejections.map(String), [], 'no unhandled rejection (it would have ended the process)');
    assert.is(revoked.length, 1, 'the valid subscriber was told');
    assert.is((revoked[0] as { segment: string }).segment, engine.segmentName);
    assert.is(engine.closed, false);
  } finally {
    hostile.close();
    await good.close();
    await engine.close();
  }
});

// An endpoint zeromq cannot dial was taken and failed each request; one it refuses outright
// ("junk", undefined) threw zeromq's bare "Invalid argument" or a TypeError from the constructor.
test('a control client for an endpoint that is not host:port is refused at construction with INVALID_ARGUMENT, no unhandled rejection', async () => {
  const rejections = await collectRejections(async () => {
    for (const endpoint of ['127.0.0.1:1x', '127.0.0.1:99999', 'junk', 'tcp://127.0.0.1:9', undefined]) {
      let e: unknown;
      try {
        new ControlClient(endpoint as never).close();
      } catch (x) {
        e = x;
      }
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${String(endpoint)}: ${String(e)}`);
      assert.match((e as Error).message, /segment name/i);
    }
  });
  assert.equal(rejections.map(String), []);
});

test('a control handler that is not a function, or a type that is not a string, is refused when registered', () => {
  const server = new ControlServer();
  try {
    for (const [type, handler, message] of [
      ['x', 5, /^Expected the handler of "x" to be a function, got number$/],
      ['x', undefined, /^Expected the handler of "x" to be a function, got undefined$/],
      ['', async () => null, /^Expected a control message type \(a non-empty string\), got string$/],
      [7, async () => null, /^Expected a control message type \(a non-empty string\), got number$/],
    ] as const) {
      let e: unknown;
      try {
        server.handle(type as never, handler as never);
      } catch (x) {
        e = x;
      }
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${String(type)}: ${String(e)}`);
      assert.match((e as Error).message, message);
    }
    server.handle('x', async () => null)(); // a function is still taken
  } finally {
    void server.close();
  }
});

test('one client flooding requests whose handlers wait is refused past its own bound, while another client is still served', async () => {
  await withServer(async (server, endpoint, raw) => {
    const stuck = holdingHandler();
    server.handle('stuck', stuck.handler);
    for (let id = 1; id <= MAX_RUNNING_PER_CLIENT + 3; id++) await raw.send(encodeMessage({ v: 1, id, type: 'stuck', body: null }));
    const refused = [];
    for (let k = 0; k < 3; k++) refused.push((await reply(raw, 10_000)) as ErrorReply);
    assert.equal(
      refused.map((r) => [r.id, r.code]),
      [1, 2, 3].map((k) => [MAX_RUNNING_PER_CLIENT + k, 'POOL_EXHAUSTED']),
      "the flooding client's requests past its bound were refused, and only those",
    );
    assert.match(refused[0]!.message, /of this client/);
    assert.is(stuck.holding, MAX_RUNNING_PER_CLIENT, 'a handler ran for each request within the bound');
    // The flood's handlers still wait: another client's request is answered meanwhile.
    await stillServes(endpoint);
    stuck.release();
  });
});

test('clients together past the process bound: each request past it is answered POOL_EXHAUSTED at once; served again once they finish', async () => {
  await withServer(async (server, endpoint, raw) => {
    const stuck = holdingHandler();
    server.handle('stuck', stuck.handler);
    const clients = MAX_RUNNING_HANDLERS / MAX_RUNNING_PER_CLIENT;
    const dealers = [raw];
    for (let c = 1; c <= clients; c++) {
      const d = new Dealer({ linger: 0 });
      d.connect(`tcp://${endpoint}`);
      dealers.push(d);
    }
    try {
      // `clients` clients fill the process's bound, each within its own; the last one is refused.
      let id = 0;
      for (const d of dealers.slice(1))
        for (let k = 0; k < MAX_RUNNING_PER_CLIENT; k++) await d.send(encodeMessage({ v: 1, id: ++id, type: 'stuck', body: null }));
      // The server reads its clients in turn: the last client sends once the bound is full.
      let stop: NodeJS.Timeout | undefined;
      await Promise.race([
        stuck.whenHolding(MAX_RUNNING_HANDLERS),
        new Promise((_, no) => (stop = setTimeout(() => no(new Error(`${stuck.holding} handlers ran within 20 s`)), 20_000))),
      ]);
      clearTimeout(stop);
      for (let k = 1; k <= 3; k++) await raw.send(encodeMessage({ v: 1, id: ++id, type: 'stuck', body: null }));
      const refused = [];
      for (let k = 0; k < 3; k++) refused.push((await reply(raw, 10_000)) as ErrorReply);
      assert.equal(
        refused.map((r) => [r.id, r.code]),
        [1, 2, 3].map((k) => [MAX_RUNNING_HANDLERS + k, 'POOL_EXHAUSTED']),
        'the requests past the bound were refused, and only those',
      );
      assert.match(refused[0]!.message, new RegExp(`answering ${MAX_RUNNING_HANDLERS} control requests;`));
      assert.is(stuck.holding, MAX_RUNNING_HANDLERS, 'a handler ran for each request within the bound');
      stuck.release();
      const answered = await Promise.all(dealers.slice(1).map((d) => reply(d, 10_000)));
      assert.ok(
        answered.every((r) => (r as { ok?: boolean }).ok === true),
        'the released handlers were answered',
      );
      await stillServes(endpoint);
    } finally {
      for (const d of dealers.slice(1)) d.close();
    }
  });
});

test.run();
