import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Socket } from 'node:net';
import { PluginRegistry, batchOf, createTransferEngine, isTransferError, untilSettled, type TransferEngine } from '@te/connector';
import { allocFakeDeviceMemory, createFakePlugin, pattern } from '@te/testkit';

// Two fake transports model SGLang's split: GPU KV over an NVLink-class transport,
// host aux data over a TCP-class one.
const gpu = createFakePlugin({ name: 'fake-nvlink', class: 'intra-nvlink', memoryKinds: ['cuda'], notifications: false });
const tcp = createFakePlugin({ name: 'fake-tcp', class: 'tcp', memoryKinds: ['cpu'] });
const writeOnly = createFakePlugin({ name: 'fake-write-only', class: 'rdma', read: false, notifications: false });

const registry = new PluginRegistry({ builtins: false });
for (const p of [gpu, tcp, writeOnly]) registry.register(p.plugin.name, p.plugin);
const both = { connector: 'fake-nvlink', transports: ['fake-tcp'] };

const test = suite('engine routing and negotiation');
const engines: TransferEngine[] = [];
const make = async (config: Parameters<typeof createTransferEngine>[0]) => {
  const e = await createTransferEngine(config, { registry });
  engines.push(e);
  return e;
};
test.after(async () => {
  await Promise.all(engines.map((e) => e.close()));
});

test('GPU memory goes over the NVLink-class transport, host memory over TCP, in one batch', async () => {
  const [a, b] = [await make(both), await make(both)];
  const gpuSrc = allocFakeDeviceMemory(4096);
  gpuSrc.bytes.set(pattern(4096, 1));
  const gpuDst = allocFakeDeviceMemory(4096);
  await a.registerMemory({ addr: gpuSrc.addr, length: 4096n, device: 'cuda:0' });
  await b.registerMemory({ addr: gpuDst.addr, length: 4096n, device: 'cuda:0' });
  const hostSrc = pattern(256, 2);
  const hostDst = new Uint8Array(256);
  const hs = await a.registerMemory(hostSrc);
  const hd = await b.registerMemory(hostDst);
  const before = { gpu: gpu.faults.batches, tcp: tcp.faults.batches };
  const notes: string[] = [];
  b.onNotification((n) => notes.push(new TextDecoder().decode(n.payload)));
  await a.transfer(
    b.segmentName,
    batchOf([
      { op: 'write', local: gpuSrc.addr, remote: gpuDst.addr, length: 4096 },
      { op: 'write', local: hs.addr, remote: hd.addr, length: 256 },
    ]),
    { notify: new TextEncoder().encode('done') },
  );
  assert.equal(gpuDst.bytes, pattern(4096, 1));
  assert.equal(hostDst, pattern(256, 2));
  assert.is(gpu.faults.batches - before.gpu, 1, 'one batch over the GPU transport');
  // Data batch plus the trailing notification, both over TCP (the only one with notifications).
  assert.is(tcp.faults.batches - before.tcp, 2);
  assert.equal(notes, ['done'], 'notification delivered once, after both parts');
});

test('a notification alone reaches a peer that holds several memory kinds', async () => {
  const [a, b] = [await make(both), await make(both)];
  const g = allocFakeDeviceMemory(64);
  await b.registerMemory({ addr: g.addr, length: 64n, device: 'cuda:0' });
  await b.registerMemory(new Uint8Array(64));
  await a.registerMemory(new Uint8Array(64));
  const g2 = allocFakeDeviceMemory(64);
  await a.registerMemory({ addr: g2.addr, length: 64n, device: 'cuda:0' });
  const notes: string[] = [];
  b.onNotification((n) => notes.push(new TextDecoder().decode(n.payload)));
  await a.transfer(b.segmentName, batchOf([]), { notify: new TextEncoder().encode('only a note') });
  assert.equal(notes, ['only a note']);
});

test('a split batch settles every part before it rejects', async () => {
  const [a, b] = [await make(both), await make(both)];
  const gs = allocFakeDeviceMemory(256);
  gs.bytes.set(pattern(256, 4));
  const gd = allocFakeDeviceMemory(256);
  await a.registerMemory({ addr: gs.addr, length: 256n, device: 'cuda:0' });
  await b.registerMemory({ addr: gd.addr, length: 256n, device: 'cuda:0' });
  const hs = await a.registerMemory(new Uint8Array(64));
  const hd = await b.registerMemory(new Uint8Array(64));
  gpu.faults.latencyMs = 150;
  tcp.faults.failRequest(1);
  const started = Date.now();
  try {
    await a.transfer(
      b.segmentName,
      batchOf([
        { op: 'write', local: gs.addr, remote: gd.addr, length: 256 },
        { op: 'write', local: hs.addr, remote: hd.addr, length: 64 },
      ]),
    );
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'TRANSFER_FAILED'), String(e));
    assert.ok(Date.now() - started >= 140, 'released only after the slower GPU part settled');
    assert.equal(gd.bytes, pattern(256, 4), 'the GPU part completed');
  } finally {
    gpu.faults.reset();
    tcp.faults.reset();
  }
});

test('a split batch whose other part may still write the peer says so on the error it throws', async () => {
  const [a, b] = [await make(both), await make(both)];
  const gs = allocFakeDeviceMemory(256);
  const gd = allocFakeDeviceMemory(256);
  await a.registerMemory({ addr: gs.addr, length: 256n, device: 'cuda:0' });
  await b.registerMemory({ addr: gd.addr, length: 256n, device: 'cuda:0' });
  const hs = await a.registerMemory(new Uint8Array(64));
  const hd = await b.registerMemory(new Uint8Array(64));
  // Both parts time out; only the second (TCP) part's transport could not confirm its cancel.
  gpu.faults.neverComplete = true;
  tcp.faults.neverComplete = true;
  tcp.faults.unconfirmedCancel = true;
  try {
    const e = await a
      .transfer(
        b.segmentName,
        batchOf([
          { op: 'write', local: gs.addr, remote: gd.addr, length: 256 },
          { op: 'write', local: hs.addr, remote: hd.addr, length: 64 },
        ]),
        { timeoutMs: 150 },
      )
      .then(
        () => undefined,
        (x: unknown) => x,
      );
    assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
    assert.is(e.plugin, 'fake-nvlink', "the first part's error is thrown");
    assert.is(e.details?.remoteMayBeWritten, true, "and it carries the other part's remoteMayBeWritten");
    assert.equal(await untilSettled(e), { remoteMayBeWritten: true });
  } finally {
    gpu.faults.reset();
    tcp.faults.reset();
  }
});

test('the batch deadline and signal cover fetching the peer descriptor (a slow peer: accepts, never answers)', async () => {
  const a = await make({ connector: 'fake-tcp', timeouts: { handshakeMs: 10_000 } });
  const src = await a.registerMemory(new Uint8Array(64));
  const held: Socket[] = [];
  const silent = createServer((s) => void held.push(s));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const slow = `127.0.0.1:${(silent.address() as { port: number }).port}`;
  try {
    const started = Date.now();
    try {
      await a.write(slow, src.addr, 0x1000n, 64, { timeoutMs: 200 });
      assert.unreachable();
    } catch (e) {
      assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
      assert.match((e as Error).message, /deadline passed while fetching the descriptor of 127\.0\.0\.1:\d+/);
      assert.ok(Date.now() - started < 2_000);
    }
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    try {
      await a.write(slow, src.addr, 0x1000n, 64, { signal: ac.signal });
      assert.unreachable();
    } catch (e) {
      assert.ok(isTransferError(e, 'ABORTED'), String(e));
    }
  } finally {
    for (const s of held) s.destroy();
    silent.close();
  }
});

test('MC_FORCE_TCP routes everything over TCP; GPU memory then has no route', async () => {
  const a = await make({ ...both, forceTcp: true });
  const b = await make(both);
  const src = await a.registerMemory(pattern(64, 3));
  const dstBytes = new Uint8Array(64);
  const dst = await b.registerMemory(dstBytes);
  await a.write(b.segmentName, src.addr, dst.addr, 64);
  assert.equal(dstBytes, pattern(64, 3));
  const g = allocFakeDeviceMemory(64);
  const gh = await a.registerMemory({ addr: g.addr, length: 64n, device: 'cuda:0' });
  const g2 = allocFakeDeviceMemory(64);
  const gh2 = await b.registerMemory({ addr: g2.addr, length: 64n, device: 'cuda:1' });
  try {
    await a.write(b.segmentName, gh.addr, gh2.addr, 64);
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'NO_COMMON_TRANSPORT'), String(e));
    assert.match((e as Error).message, /moves cuda memory to cuda memory \(candidates: fake-tcp\)/);
  }
});

test('a batch after the local memory kinds changed is routed by the new kinds, not the plan of the last batch', async () => {
  const [a, b] = [await make(both), await make(both)];
  const dstBytes = new Uint8Array(64);
  const dst = await b.registerMemory(dstBytes);
  const host = await a.registerMemory(pattern(64, 5));
  const before = tcp.faults.batches;
  await a.write(b.segmentName, host.addr, dst.addr, 64);
  await a.write(b.segmentName, host.addr, dst.addr, 64);
  assert.is(tcp.faults.batches - before, 2, 'host to host over the TCP-class transport');
  assert.equal(dstBytes, pattern(64, 5));
  // Only GPU memory is registered here now: GPU to host memory has no transport both hold.
  await a.unregisterMemory(host.addr);
  const g = allocFakeDeviceMemory(64);
  const gh = await a.registerMemory({ addr: g.addr, length: 64n, device: 'cuda:0' });
  try {
    await a.write(b.segmentName, gh.addr, dst.addr, 64);
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'NO_COMMON_TRANSPORT'), String(e));
    assert.match((e as Error).message, /moves cuda memory to cpu memory/);
  }
  assert.is(tcp.faults.batches - before, 2, 'nothing more went over the TCP-class transport');
});

test('two peers sharing no transport get NO_COMMON_TRANSPORT naming both lists', async () => {
  const a = await make({ connector: 'fake-tcp' });
  const b = await make({ connector: 'fake-write-only' });
  const src = await a.registerMemory(new Uint8Array(64));
  try {
    await a.write(b.segmentName, src.addr, 0x1000n, 64);
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'NO_COMMON_TRANSPORT'), String(e));
    assert.match((e as Error).message, /local \[fake-tcp\], peer \[fake-write-only\]/);
  }
});

test('memory no transport can register is refused with the way out', async () => {
  const a = await make({ connector: 'fake-tcp' });
  const g = allocFakeDeviceMemory(64);
  try {
    await a.registerMemory({ addr: g.addr, length: 64n, device: 'cuda:0' });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'MEMORY_KIND_UNSUPPORTED'), String(e));
    assert.match((e as Error).message, /No transport of this engine \(fake-tcp\) registers raw-address cuda memory/);
  }
});

test('calling what a plugin did not declare fails naming the plugin', async () => {
  const a = await make({ connector: 'fake-write-only' });
  const b = await make({ connector: 'fake-write-only' });
  const src = await a.registerMemory(new Uint8Array(64));
  const dst = await b.registerMemory(new Uint8Array(64));
  for (const [call, message] of [
    [() => a.read(b.segmentName, src.addr, dst.addr, 64), /\[fake-write-only\] This transport does not support READ/],
    [() => a.write(b.segmentName, src.addr, dst.addr, 64, { notify: new Uint8Array(1) }), /\[fake-write-only\] This transport does not deliver notifications/],
  ] as const) {
    try {
      await call();
      assert.unreachable();
    } catch (e) {
      assert.ok(isTransferError(e, 'UNSUPPORTED_CAPABILITY'), String(e));
      assert.is((e as { plugin?: string }).plugin, 'fake-write-only');
      assert.match((e as Error).message, message);
    }
  }
});

test('descriptors travel over the control plane with u64 fields intact', async () => {
  const a = await make({ connector: 'fake-tcp', timeouts: { handshakeMs: 300 } });
  const b = await make({ connector: 'fake-tcp' });
  const h = await b.registerMemory(new Uint8Array(128));
  const d = await a.openSegment(b.segmentName);
  assert.is(d.name, b.segmentName);
  assert.is(d.epoch, b.epoch);
  assert.is(typeof d.buffers[0]!.addr, 'bigint');
  assert.is(d.buffers[0]!.addr, h.addr);
  assert.equal(d.transports['fake-tcp']!.memoryKinds, ['cpu']);
  try {
    await a.openSegment('127.0.0.1:1', { refresh: true });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'PEER_UNREACHABLE'), String(e)); // nothing listens there: known at once
  }
});

test('a peer restarted at the same address is detected; no write reaches it with stale addresses', async () => {
  const a = await make({ connector: 'fake-tcp' });
  const old = await createTransferEngine({ connector: 'fake-tcp' }, { registry });
  const port = Number(old.segmentName.split(':')[1]);
  const src = await a.registerMemory(pattern(64, 9));
  const oldDst = await old.registerMemory(new Uint8Array(64));
  await a.write(old.segmentName, src.addr, oldDst.addr, 64);
  await old.close();
  const restarted = await make({ connector: 'fake-tcp', metadata: { port } });
  assert.is(restarted.segmentName, old.segmentName);
  assert.is.not(restarted.epoch, old.epoch);
  const newBytes = new Uint8Array(64);
  const newDst = await restarted.registerMemory(newBytes);
  try {
    await a.write(old.segmentName, src.addr, oldDst.addr, 64);
    assert.unreachable('stale descriptor must not be used');
  } catch (e) {
    assert.ok(isTransferError(e, 'STALE_DESCRIPTOR'), String(e));
  }
  assert.equal(newBytes, new Uint8Array(64), 'nothing landed in the restarted peer');
  const fresh = await a.openSegment(old.segmentName);
  assert.is(fresh.epoch, restarted.epoch, 'the next use fetches the new descriptor');
  await a.write(old.segmentName, src.addr, newDst.addr, 64);
  assert.equal(newBytes, pattern(64, 9));
});

test('metrics are counted when MC_TE_METRIC is on', async () => {
  const a = await make({ connector: 'fake-tcp', metrics: true });
  const b = await make({ connector: 'fake-tcp' });
  const src = await a.registerMemory(new Uint8Array(100));
  const dst = await b.registerMemory(new Uint8Array(100));
  await a.write(b.segmentName, src.addr, dst.addr, 100);
  const m = a.metrics();
  assert.is(m.batches, 1);
  assert.is(m.bytes, 100n);
  assert.equal(m.byTransport, { 'fake-tcp': 1 });
});

test('registration arguments are validated before any transport sees them', async () => {
  const a = await make({ connector: 'fake-tcp' });
  const cases: [() => Promise<unknown>, RegExp][] = [
    [() => a.registerMemory(new Uint8Array(0)), /Cannot register an empty buffer/],
    [() => a.registerMemory(new Uint8Array(8), { device: 'cuda:0' }), /A JS buffer is host memory/],
    [() => a.registerMemory({ addr: -1n, length: 8n }), /Expected `addr` to be a non-negative u64 bigint \(or safe integer\), got -1n/],
    [() => a.registerMemory({ addr: 0x1000n, length: 8n, device: 'gpu' as never }), /Expected `device` to be "cpu" or "cuda:N"/],
    [() => a.registerMemory({ addr: 0xffff_ffff_ffff_fff0n, length: 0x100n }), /wraps past the end of the address space/],
    [() => a.registerMemory('nope' as never), /Expected an ArrayBuffer/],
  ];
  for (const [call, message] of cases) {
    try {
      await call();
      assert.unreachable();
    } catch (e) {
      assert.ok(isTransferError(e), String(e));
      assert.match((e as Error).message, message);
    }
  }
});

test.run();
