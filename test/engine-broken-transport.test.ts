import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  PluginRegistry,
  createTransferEngine,
  TransferError,
  isTransferError,
  type BatchResult,
  type TransferBatch,
  type TransferEngine,
  type Transport,
} from '@te/connector';
import { createFakePlugin } from '@te/testkit';

/*
 * A transport that breaks the SPI's contract (engine logic, over the in-process fake
 * transport with its submit replaced): a plugin may come from a third party, so the engine
 * checks what submit gives back. It used to let a plain TypeError through (a throw from
 * submit, no promise, no result), keep a batch that was never started in use for good
 * (unregistering its memory refused), and report success for a request the transport gave
 * no status, or NaN. The other methods alike: registerMemory and openPeer answers are
 * checked, and a close() that never settles no longer holds engine.close() for good, nor
 * a registerMemory or unregisterMemory that never settles the engine's registration queue.
 */
type Answer = (batch: TransferBatch, real: () => Promise<BatchResult>) => unknown;
let answer: Answer = (_batch, real) => real();
/** Replacements of the transport's other methods, by name, while a test sets them. */
let lifecycle: Partial<Record<'registerMemory' | 'unregisterMemory' | 'openPeer' | 'close' | 'lookupSegment', (real: () => unknown) => unknown>> = {};
const fake = createFakePlugin({ name: 'fake-broken' });
const registry = new PluginRegistry({ builtins: false });
registry.register(fake.plugin.name, {
  ...fake.plugin,
  create: async (context, options) => {
    const transport: Transport = await fake.plugin.create(context, options);
    const submit = transport.submit.bind(transport);
    transport.submit = ((peer, batch, submitOptions) => answer(batch, () => submit(peer, batch, submitOptions))) as Transport['submit'];
    for (const method of ['registerMemory', 'unregisterMemory', 'openPeer', 'close'] as const) {
      const real = (transport[method] as (...args: unknown[]) => unknown).bind(transport);
      (transport as unknown as Record<string, unknown>)[method] = (...args: unknown[]) =>
        (lifecycle[method] ?? ((call: () => unknown) => call()))(() => real(...args));
    }
    // The fake speaks no foreign metadata protocol: its lookup finds no peer unless a test says otherwise.
    transport.lookupSegment = (() => (lifecycle.lookupSegment ?? ((call: () => unknown) => call()))(async () => undefined)) as Transport['lookupSegment'];
    return transport;
  },
});

const cases: [string, Answer, RegExp][] = [
  [
    'throws from submit',
    () => {
      throw new TypeError('boom');
    },
    /transport fake-broken threw from submit instead of rejecting: boom/,
  ],
  [
    'returns a result, not a promise',
    (batch) => ({ statuses: new Int32Array(batch.opcodes.length), bytes: 0n }),
    /returned an object \(Object\) from submit, not a promise/,
  ],
  ['resolves with nothing', async (_b, real) => (await real(), undefined), /settled a batch of 1 requests with undefined instead of \{ statuses, bytes \}/],
  [
    'gives fewer statuses than requests',
    async (_b, real) => ({ ...(await real()), statuses: new Int32Array(0) }),
    /settled a batch of 1 requests with 0 statuses; which requests landed is unknown/,
  ],
  [
    'gives a status that is not an integer',
    async (_b, real) => ({ ...(await real()), statuses: [Number.NaN] }),
    /gave request 0 the status NaN, not an integer/,
  ],
  ['gives a byte count that is not an integer', async (_b, real) => ({ ...(await real()), bytes: -1 }), /settled a batch with -1 as its byte count/],
  ['rejects with a string', () => Promise.reject('nope'), /transport fake-broken's submit\(\) rejected with a non-TransferError: nope/],
  // Before, a TransferError reached the caller whatever its code, one that no caller's switch on `code` knows.
  [
    "rejects with a TransferError whose code is not one of te's",
    () => Promise.reject(new TransferError('WARP_CORE_BREACH' as never, 'breach')),
    /transport fake-broken's submit\(\) rejected with a TransferError with the unknown code "WARP_CORE_BREACH": breach/,
  ],
];

async function pair(open = true, timeouts: { registerMs?: number } = {}): Promise<{ a: TransferEngine; b: TransferEngine; local: bigint; remote: bigint }> {
  const a = await createTransferEngine({ connector: 'fake-broken', bindAddress: '127.0.0.1', timeouts }, { registry, env: {} });
  const b = await createTransferEngine({ connector: 'fake-broken', bindAddress: '127.0.0.1' }, { registry, env: {} });
  const local = (await a.registerMemory(new Uint8Array(4096))).addr;
  const remote = (await b.registerMemory(new Uint8Array(4096))).addr;
  if (open) await a.openSegment(b.segmentName);
  return { a, b, local, remote };
}

for (const [what, broken, message] of cases) {
  test(`a transport that ${what}: INTERNAL naming the plugin, and the memory is free`, async () => {
    const { a, b, local, remote } = await pair();
    try {
      answer = broken;
      const e = await a.write(b.segmentName, local, remote, 64, { timeoutMs: 5_000 }).then(
        () => undefined,
        (x: unknown) => x,
      );
      assert.ok(isTransferError(e, 'INTERNAL'), `expected INTERNAL, got ${String(e)}`);
      assert.is((e as { plugin?: string }).plugin, 'fake-broken');
      assert.match((e as Error).message, message);
      answer = (_batch, real) => real();
      // Nothing of the batch is left in use, and the engine goes on.
      await a.write(b.segmentName, local, remote, 64, { timeoutMs: 5_000 });
      await a.unregisterMemory(local);
    } finally {
      answer = (_batch, real) => real();
      await a.close();
      await b.close();
    }
  });
}

test('an array of integer statuses and a number of bytes are taken as the Int32Array and bigint they stand for', async () => {
  const { a, b, local, remote } = await pair();
  try {
    answer = async (_b, real) => {
      const r = await real();
      return { statuses: [...r.statuses], bytes: Number(r.bytes) };
    };
    const r = await a.write(b.segmentName, local, remote, 64, { timeoutMs: 5_000 });
    assert.ok(r.statuses instanceof Int32Array);
    assert.equal([...r.statuses], [0]);
    assert.is(r.bytes, 64n);
  } finally {
    answer = (_batch, real) => real();
    await a.close();
    await b.close();
  }
});

const lifecycleCases: [string, typeof lifecycle, (a: TransferEngine, b: TransferEngine) => Promise<unknown>, RegExp][] = [
  [
    'registerMemory throws',
    {
      registerMemory: () => {
        throw new TypeError('boom');
      },
    },
    (a) => a.registerMemory(new Uint8Array(64)),
    /transport fake-broken's registerMemory\(\) threw a non-TransferError: boom/,
  ],
  [
    'registerMemory resolves with nothing',
    { registerMemory: async () => undefined },
    (a) => a.registerMemory(new Uint8Array(64)),
    /registerMemory\(\) resolved with undefined, not \{ addr: bigint, length: bigint \}/,
  ],
  [
    'openPeer rejects with a string',
    { openPeer: () => Promise.reject('nope') },
    (a, b) => a.openSegment(b.segmentName),
    /openPeer\(\) rejected with a non-TransferError: nope/,
  ],
  ['openPeer returns no peer', { openPeer: () => 42 }, (a, b) => a.openSegment(b.segmentName), /openPeer resolved with 42, not a peer/],
  [
    "registerMemory rejects with a TransferError whose code is not one of te's",
    { registerMemory: () => Promise.reject(new TransferError('PINNING_FAILED' as never, 'no pages')) },
    (a) => a.registerMemory(new Uint8Array(64)),
    /transport fake-broken's registerMemory\(\) rejected with a TransferError with the unknown code "PINNING_FAILED": no pages/,
  ],
];

for (const [what, broken, act, message] of lifecycleCases) {
  test(`a transport whose ${what}: INTERNAL naming the plugin`, async () => {
    const { a, b } = await pair(false);
    try {
      lifecycle = broken;
      const e = await act(a, b).then(
        () => undefined,
        (x: unknown) => x,
      );
      assert.ok(isTransferError(e, 'INTERNAL'), `expected INTERNAL, got ${String(e)}`);
      assert.is((e as { plugin?: string }).plugin, 'fake-broken');
      assert.match((e as Error).message, message);
    } finally {
      lifecycle = {};
      await a.close();
      await b.close();
    }
  });
}

/** TRANSPORT_CLOSE_BOUND_MS of engine/guarded-transport.ts. */
const CLOSE_BOUND_MS = 10_000;

test("a transport whose lookupSegment() never settles: openSegment fails with TIMEOUT after the handshake deadline plus the plugin's grace", async () => {
  const { a, b } = await pair(false);
  try {
    lifecycle = { lookupSegment: () => new Promise(() => {}) };
    const started = Date.now();
    const e = await within(a.openSegment(b.segmentName), 15_000);
    const took = Date.now() - started;
    assert.ok(isTransferError(e, 'TIMEOUT'), `expected TIMEOUT, got ${String(e)}`);
    assert.match((e as Error).message, /transport fake-broken did not settle lookupSegment\(\) within 7000 ms/);
    assert.ok(took >= 6_900 && took < 10_000, `openSegment took ${took} ms`);
    lifecycle = {};
    // The failed look-up is not kept: the next one reaches the peer.
    await a.openSegment(b.segmentName);
  } finally {
    lifecycle = {};
    // Bounded: before the guard bounded the look-up, close() waited for it for good too.
    await within(a.close(), 15_000);
    await b.close();
  }
});

test('a registration under way when close() is called: close() ends after the bound, and what the transport registers later is given back', async () => {
  const { a, b } = await pair(false, { registerMs: 60_000 });
  let gaveBack = 0;
  try {
    lifecycle = {
      // Registered at once, answered after close() stopped waiting.
      registerMemory: (real) => {
        const registered = real();
        return new Promise((resolve) => setTimeout(() => resolve(registered), CLOSE_BOUND_MS + 4_000));
      },
      unregisterMemory: (real) => (gaveBack++, real()),
    };
    const registering = a.registerMemory(new Uint8Array(4096)).then(
      () => 'registered',
      (e: unknown) => e,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = Date.now();
    assert.is(await within(a.close(), CLOSE_BOUND_MS + 5_000), undefined);
    const took = Date.now() - started;
    assert.ok(took >= CLOSE_BOUND_MS - 100 && took < CLOSE_BOUND_MS + 3_000, `close took ${took} ms`);
    const e = await within(registering, 8_000);
    assert.ok(isTransferError(e, 'ENGINE_CLOSED'), `expected ENGINE_CLOSED, got ${String(e)}`);
    assert.is(gaveBack, 1);
  } finally {
    lifecycle = {};
    await b.close();
  }
});

test('a transport whose close() never settles: engine.close() goes on without it after the bound', async () => {
  const { a, b } = await pair();
  try {
    lifecycle = { close: () => new Promise(() => {}) };
    const started = Date.now();
    await a.close();
    const took = Date.now() - started;
    assert.ok(took >= CLOSE_BOUND_MS - 100 && took < CLOSE_BOUND_MS + 5_000, `close took ${took} ms`);
  } finally {
    lifecycle = {};
    await b.close();
  }
});

/** Settles with 'hung' if `work` has not settled within `ms`: a test of a bound fails rather than hangs. */
function within(work: Promise<unknown>, ms: number): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise((resolve) => (timer = setTimeout(() => resolve('hung'), ms)));
  return Promise.race([
    work.then(
      (v) => v,
      (e: unknown) => e,
    ),
    hung,
  ]).finally(() => clearTimeout(timer));
}

const REGISTER_MS = 300;
const registrationHangs: [string, typeof lifecycle, (a: TransferEngine, local: bigint) => Promise<unknown>][] = [
  ['registerMemory', { registerMemory: () => new Promise(() => {}) }, (a) => a.registerMemory(new Uint8Array(4096))],
  ['unregisterMemory', { unregisterMemory: () => new Promise(() => {}) }, (a, local) => a.unregisterMemory(local)],
];

for (const [method, broken, act] of registrationHangs) {
  test(`a transport whose ${method}() never settles: TIMEOUT after timeouts.registerMs, and the next registration goes on`, async () => {
    const { a, b, local } = await pair(false, { registerMs: REGISTER_MS });
    try {
      lifecycle = broken;
      const started = Date.now();
      const e = await within(act(a, local), 5_000);
      assert.ok(isTransferError(e, 'TIMEOUT'), `expected TIMEOUT, got ${String(e)}`);
      assert.is((e as { plugin?: string }).plugin, 'fake-broken');
      assert.match((e as Error).message, new RegExp(`did not settle ${method}\\(\\) within ${REGISTER_MS} ms`));
      assert.ok(Date.now() - started >= REGISTER_MS - 20, `settled after ${Date.now() - started} ms`);
      lifecycle = {};
      // The registration queue is not held by the call the plugin never answered.
      const next = await within(a.registerMemory(new Uint8Array(4096)), 5_000);
      assert.is(typeof (next as { addr?: unknown }).addr, 'bigint', `the next registration gave ${String(next)}`);
    } finally {
      lifecycle = {};
      await a.close();
      await b.close();
    }
  });
}

test.run();
