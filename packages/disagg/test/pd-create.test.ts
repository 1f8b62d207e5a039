import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine, isTransferError, type KVBuffers, type TransferEngine } from '@te/connector';
import {
  ECConnectorScheduler,
  ECConnectorWorker,
  KVConnectorScheduler,
  KVConnectorWorker,
  createECConsumer,
  createECProducer,
  createKVManager,
  layerwiseEnabled,
  startBootstrapServer,
} from '../src/index.js';
import { freePort, layout, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * createKVManager registers the rank's buffers and may start the bootstrap server: a
 * failure after that (a rank refusing its buffers, a bootstrap server that never
 * answers) must leave neither registered memory nor a bound port behind.
 */
const BYTES = 4096;

/** Host memory the engine does not know yet, by raw address (what a framework passes in). */
async function rawMemory(engine: TransferEngine): Promise<{ base: bigint; keep: Buffer }> {
  const keep = Buffer.alloc(BYTES);
  const base = (await engine.registerMemory(keep)).addr;
  await engine.unregisterMemory(base);
  return { base, keep };
}

function buffers(base: bigint, kvItem: bigint): KVBuffers {
  return {
    kv: { addrs: BigUint64Array.of(base, base + 1024n), lengths: BigUint64Array.of(1024n, 1024n), itemLengths: BigUint64Array.of(kvItem, 256n) },
    aux: { addrs: BigUint64Array.of(base + 2048n), lengths: BigUint64Array.of(256n), itemLengths: BigUint64Array.of(64n) },
    attention: 'mha',
    numLayers: 1,
    pageSize: 4,
    kvCacheDtype: 'bf16',
    device: 'cpu',
  };
}

const inside = (engine: TransferEngine, base: bigint) => engine.registeredMemory().filter((r) => r.addr >= base && r.addr < base + BigInt(BYTES));

test('a prefill rank that refuses its buffers (item length 0) unregisters them and frees the bootstrap port', async () => {
  const engine = await createTransferEngine(TCP_CONFIG);
  try {
    const { base, keep } = await rawMemory(engine);
    const port = await freePort();
    const e = await createKVManager({
      role: 'prefill',
      layout: layout(1, 0),
      buffers: buffers(base, 0n),
      engine,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      timeouts: FAST,
    }).then(
      () => assert.unreachable('item length 0 must be refused'),
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    assert.equal(inside(engine, base), [], 'the failed manager left its buffers registered');
    const server = await startBootstrapServer({ host: '127.0.0.1', port });
    await server.close();
    // The same engine, memory and port serve a valid manager afterwards.
    const m = await createKVManager({
      role: 'prefill',
      layout: layout(1, 0),
      buffers: buffers(base, 256n),
      engine,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      timeouts: FAST,
    });
    assert.is(inside(engine, base).length, 3);
    await m.close();
    assert.equal(inside(engine, base), []);
    keep.fill(0); // keeps the memory alive until here
  } finally {
    await engine.close();
  }
});

test('a prefill rank whose bootstrap server never comes up times out and unregisters its buffers', async () => {
  const engine = await createTransferEngine(TCP_CONFIG);
  try {
    const { base, keep } = await rawMemory(engine);
    const port = await freePort(); // nobody listens there
    const e = await createKVManager({
      role: 'prefill',
      layout: layout(1, 0),
      buffers: buffers(base, 256n),
      engine,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      serveBootstrap: false,
      timeouts: { ...FAST, bootstrapMs: 500 },
    }).then(
      () => assert.unreachable('registration cannot succeed'),
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
    assert.equal(inside(engine, base), [], 'the failed manager left its buffers registered');
    keep.fill(0);
  } finally {
    await engine.close();
  }
});

// Before, an array of the wrong length or a missing aux threw a plain TypeError from the
// registration, and overlapping buffers or head counts that cannot be sharded were taken
// (a page written into one buffer landed in the other; the planner failed per request).
test('KV buffers it cannot use are INVALID_ARGUMENT naming the problem, before anything is registered', async () => {
  const engine = await createTransferEngine(TCP_CONFIG);
  try {
    const { base, keep } = await rawMemory(engine);
    const cases: [string, (b: KVBuffers) => void, RegExp, number?][] = [
      ['one length short', (b) => void (b.kv.lengths = BigUint64Array.of(1024n)), /kv: addrs, lengths and itemLengths must have the same length \(2, 1, 2\)/],
      ['no aux', (b) => void delete (b as Partial<KVBuffers>).aux, /aux must be \{ addrs, lengths, itemLengths \}, got undefined/],
      ['a number address', (b) => void (b.kv.addrs = [Number(base), base + 1024n] as unknown as BigUint64Array), /kv\.addrs\[0\] must be a u64 bigint/],
      ['kv over aux', (b) => void (b.aux.addrs = BigUint64Array.of(base + 1000n)), /kv buffer 0 \[0x[0-9a-f]+, 0x[0-9a-f]+\) overlaps aux buffer 0/],
      ['kvHeadsPerRank 0', (b) => void (b.kvHeadsPerRank = 0), /kvHeadsPerRank must be a positive integer, got 0/],
      [
        'heads over TP 3',
        (b) => void (b.totalKvHeads = 8),
        /totalKvHeads 8 cannot be sharded over attention TP 3: 8 units do not divide evenly over TP size 3/,
        3,
      ],
      [
        'heads of the rank',
        (b) => Object.assign(b, { totalKvHeads: 8, kvHeadsPerRank: 8 }),
        /kvHeadsPerRank 8, but totalKvHeads 8 over attention TP 2 gives rank 0 4/,
        2,
      ],
    ];
    for (const [name, spoil, message, tp = 1] of cases) {
      const b = buffers(base, 256n);
      spoil(b);
      const e = await createKVManager({ role: 'decode', layout: layout(tp, 0), buffers: b, engine, timeouts: FAST }).then(
        () => assert.unreachable(`${name}: accepted`),
        (x: unknown) => x as Error,
      );
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${name}: ${String(e)}`);
      assert.match(e.message, message, name);
      assert.equal(inside(engine, base), [], `${name}: nothing registered`);
    }
    // The same region given twice is one buffer, registered once.
    const twice = buffers(base, 256n);
    twice.kv.addrs[1] = base;
    const m = await createKVManager({ role: 'decode', layout: layout(1, 0), buffers: twice, engine, timeouts: FAST });
    assert.is(inside(engine, base).length, 2);
    await m.close();
    keep.fill(0);
  } finally {
    await engine.close();
  }
});

// A JavaScript caller that leaves an options object out met a TypeError ("Cannot read
// properties of undefined (reading 'attnTpRank')") from inside the runtime.
test('entry points refuse a missing options, layout or buffers object with INVALID_ARGUMENT naming it', async () => {
  const calls: [string, () => Promise<unknown> | unknown, RegExp][] = [
    ['createKVManager(null)', () => createKVManager(null as never), /Expected createKVManager's options to be an object, got null/],
    ['no layout', () => createKVManager({ role: 'prefill' } as never), /Expected `layout` \(the rank's ParallelLayout\) to be an object, got undefined/],
    ['layout an array', () => createKVManager({ role: 'decode', layout: [] } as never), /Expected `layout` .* to be an object, got an array/],
    [
      'no buffers',
      () => createKVManager({ role: 'decode', layout: layout(1, 0) } as never),
      /Expected `buffers` \(the rank's KVBuffers\) to be an object, got undefined/,
    ],
    ['createECProducer(null)', () => createECProducer(null as never), /Expected createECProducer's options to be an object, got null/],
    ['createECConsumer(7)', () => createECConsumer(7 as never), /Expected createECConsumer's options to be an object, got number/],
    [
      'new KVConnectorScheduler()',
      () => new KVConnectorScheduler(undefined as never),
      /Expected KVConnectorScheduler's options to be an object, got undefined/,
    ],
    // These met a TypeError when first used (KVConnectorWorker: registerKvCaches; the EC
    // adapters: hasCacheItem, saveCaches, waitForLoad), and a role other than 'producer'
    // made an EC scheduler a consumer without a word.
    ['new KVConnectorWorker()', () => new KVConnectorWorker(undefined as never), /Expected KVConnectorWorker's options to be an object, got undefined/],
    [
      'new ECConnectorScheduler()',
      () => new ECConnectorScheduler(undefined as never),
      /Expected ECConnectorScheduler's options to be an object, got undefined/,
    ],
    [
      "ECConnectorScheduler role 'prefill'",
      () => new ECConnectorScheduler({ role: 'prefill' } as never),
      /^Expected ECConnectorScheduler's role to be 'producer' or 'consumer', got "prefill"$/,
    ],
    ['new ECConnectorWorker(null)', () => new ECConnectorWorker(null as never), /Expected ECConnectorWorker's options to be an object, got null/],
    [
      'saveCaches without a producer',
      () => new ECConnectorWorker({}).saveCaches(new Map([['h', new Uint8Array(4)]]), 'h'),
      /^saveCaches needs a producer \(ECConnectorWorker's `producer`\)$/,
    ],
    ['waitForLoad without a consumer', () => new ECConnectorWorker({}).waitForLoad(), /^waitForLoad needs a consumer \(ECConnectorWorker's `consumer`\)$/],
  ];
  for (const [name, call, message] of calls) {
    const e = await Promise.resolve()
      .then(call)
      .then(
        () => assert.unreachable(`${name}: accepted`),
        (x: unknown) => x as Error,
      );
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${name}: ${String(e)}`);
    assert.match(e.message, message, name);
  }
});

// Before, TE_KV_CHECKSUMS=maybe (or yes) and TE_LAYERWISE=maybe were read as off without a
// word, turning off the check the variable was set to turn on; and TE_LAYERWISE=0 did not
// override SGLang's SGLANG_MOONCAKE_ASYNC_KV=1.
test('TE_KV_CHECKSUMS and TE_LAYERWISE are read as booleans (pages too for checksums); another value is INVALID_CONFIG before anything is registered', async () => {
  const refused = (f: () => unknown): Error => {
    try {
      f();
    } catch (e) {
      return e as Error;
    }
    return assert.unreachable('accepted') as never;
  };
  const e = refused(() => layerwiseEnabled(undefined, { TE_LAYERWISE: 'maybe' }));
  assert.ok(isTransferError(e, 'INVALID_CONFIG'), String(e));
  assert.match(e.message, /Expected environment variable TE_LAYERWISE to be a boolean .*, got "maybe"/);
  assert.is(layerwiseEnabled(undefined, { TE_LAYERWISE: 'yes' }), true);
  assert.is(layerwiseEnabled(undefined, { TE_LAYERWISE: '0', SGLANG_MOONCAKE_ASYNC_KV: '1' }), false, "te's own variable decides");
  assert.is(layerwiseEnabled(undefined, { SGLANG_MOONCAKE_ASYNC_KV: 'True' }), true);
  assert.is(layerwiseEnabled(undefined, { SGLANG_MOONCAKE_ASYNC_KV: 'junk' }), false, "SGLang's variable, read as SGLang reads it");
  assert.is(layerwiseEnabled(false, { TE_LAYERWISE: 'maybe' }), false, 'the option wins and the variable is not read');

  const engine = await createTransferEngine(TCP_CONFIG);
  const before = process.env.TE_KV_CHECKSUMS;
  try {
    const { base, keep } = await rawMemory(engine);
    process.env.TE_KV_CHECKSUMS = 'maybe';
    const c = await createKVManager({ role: 'decode', layout: layout(1, 0), buffers: buffers(base, 256n), engine, timeouts: FAST }).then(
      () => assert.unreachable('TE_KV_CHECKSUMS=maybe must be refused'),
      (x: unknown) => x as Error,
    );
    assert.ok(isTransferError(c, 'INVALID_CONFIG'), String(c));
    assert.match(c.message, /Expected environment variable TE_KV_CHECKSUMS to be a boolean \(1\/0, true\/false, yes\/no, on\/off\) or pages, got "maybe"/);
    assert.equal(inside(engine, base), [], 'nothing was registered');
    for (const value of ['yes', 'pages', 'off']) {
      process.env.TE_KV_CHECKSUMS = value;
      const m = await createKVManager({ role: 'decode', layout: layout(1, 0), buffers: buffers(base, 256n), engine, timeouts: FAST });
      await m.close();
    }
    keep.fill(0);
  } finally {
    if (before === undefined) delete process.env.TE_KV_CHECKSUMS;
    else process.env.TE_KV_CHECKSUMS = before;
    await engine.close();
  }
});

test.run();
