// mooncake-wire inside an engine, beside mooncake-tcp: memory the engine registers is served
// to Mooncake initiators, and te peers keep talking over mooncake-tcp (never over this wire).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PluginRegistry, batchOf, createTransferEngine, isTransferError, type TransferEngine } from '@te/connector';
import wirePlugin from '../src/index.js';
import { wire } from './helpers.js';

function registry(): PluginRegistry {
  const r = new PluginRegistry();
  r.register('mooncake-wire', wirePlugin);
  return r;
}

async function engine(listen: boolean): Promise<TransferEngine> {
  return createTransferEngine(
    { connector: 'mooncake-tcp', transports: ['mooncake-wire'], logLevel: 'error', transportOptions: { 'mooncake-wire': { listen } } },
    { registry: registry() },
  );
}

test('an engine serves what it registers to Mooncake initiators, and te peers still use mooncake-tcp', async () => {
  const a = await engine(true);
  const b = await engine(false);
  const init = await wire({});
  try {
    const target = new Uint8Array(1 << 16);
    const h = await a.registerMemory(target);
    const seg = (a.descriptor().transports['mooncake-wire']!.endpoint as { mooncakeSegment: string }).mooncakeSegment;
    assert.match(seg, /^127\.0\.0\.1:\d+$/);

    // A Mooncake-protocol initiator writes into the engine's registered memory.
    const src = new Uint8Array(4096).fill(0x6b);
    const s = await init.registerMemory({ buffer: src, length: 4096n, device: 'cpu', remoteAccess: false });
    const { descriptor, peer } = await init.openSegment(seg);
    assert.equal(
      descriptor.buffers.map((x) => x.addr),
      [h.addr],
    );
    await init.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: h.addr + 100n, length: 4096 }]), { timeoutMs: 5000 });
    assert.ok(target.subarray(100, 4196).every((x) => x === 0x6b));
    assert.is(target[99], 0);

    // te to te: routed over mooncake-tcp; the wire transport refuses te peers.
    const mine = new Uint8Array(4096).fill(0x21);
    const m = await b.registerMemory(mine);
    const carriers: string[][] = [];
    b.observeBatches((r) => carriers.push([...r.transports]));
    await b.write(a.segmentName, m.addr, h.addr, 4096);
    assert.ok(target.subarray(0, 4096).every((x) => x === 0x21));
    assert.equal(carriers, [['mooncake-tcp']]);
  } finally {
    await init.close();
    await b.close();
    await a.close();
  }
});

test("the engine's openSegment('host:port'), write and read reach a Mooncake segment; TransferError codes as usual", async () => {
  const target = await wire({ listen: true });
  const e = await engine(false);
  try {
    const remote = new Uint8Array(1 << 16);
    const reg = await target.registerMemory({ buffer: remote, length: BigInt(remote.length), device: 'cpu', remoteAccess: true });
    const d = await e.openSegment(target.mooncakeSegment!);
    assert.equal(Object.keys(d.transports), ['mooncake-wire']);
    assert.equal(
      d.buffers.map((b) => [b.addr, b.length]),
      [[reg.addr, 65536n]],
    );
    const mine = new Uint8Array(8192);
    for (let i = 0; i < mine.length; i++) mine[i] = (i * 13) & 0xff;
    const h = await e.registerMemory(mine);
    await e.write(target.mooncakeSegment!, h.addr, reg.addr + 1000n, 4096);
    assert.equal(remote.subarray(1000, 5096), mine.subarray(0, 4096));
    await e.read(target.mooncakeSegment!, h.addr + 4096n, reg.addr + 1000n, 4096);
    assert.equal(mine.subarray(4096), mine.subarray(0, 4096));
    const err = await e.write(target.mooncakeSegment!, h.addr, reg.addr + 65000n, 4096).catch((x: unknown) => x);
    assert.ok(isTransferError(err) && err.code === 'ADDRESS_OUT_OF_RANGE', String(err));
    const late = await e.read(target.mooncakeSegment!, h.addr, reg.addr, 16, { timeoutMs: 1 }).then(
      () => 'done',
      (x: unknown) => (isTransferError(x) ? x.code : String(x)),
    );
    assert.ok(late === 'done' || late === 'TIMEOUT', late);
  } finally {
    await e.close();
    await target.close();
  }
});

test('with a deployment secret the engine does not ask names for Mooncake descriptors unless lookup is set', async () => {
  const target = await wire({ listen: true });
  const secret = 'a deployment secret of some length';
  const guarded = await createTransferEngine(
    { connector: 'mooncake-tcp', transports: ['mooncake-wire'], logLevel: 'error', secret, timeouts: { handshakeMs: 600 } },
    { registry: registry() },
  );
  const opted = await createTransferEngine(
    { connector: 'mooncake-tcp', transports: ['mooncake-wire'], logLevel: 'error', secret, transportOptions: { 'mooncake-wire': { lookup: true } } },
    { registry: registry() },
  );
  try {
    const refused = await guarded.openSegment(target.mooncakeSegment!).catch((e: unknown) => e);
    assert.ok(isTransferError(refused), 'only the control plane was asked, and a Mooncake port does not answer it');
    const d = await opted.openSegment(target.mooncakeSegment!);
    assert.equal(Object.keys(d.transports), ['mooncake-wire']);
  } finally {
    await guarded.close();
    await opted.close();
    await target.close();
  }
});

test.run();
