import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { NATIVE_STATUS, PluginRegistry, allocateBatch, batchOf, createTransferEngine, isTransferError, type TransferEngine } from '@te/connector';
import { allocFakeDeviceMemory, createFakePlugin, pattern } from '../src/index.js';

const { plugin, faults } = createFakePlugin({ name: 'fault-fake' });
type Ctx = { a: TransferEngine; b: TransferEngine; src: Uint8Array; dst: Uint8Array; local: bigint; remote: bigint };
const test = suite<Ctx>('fake transport fault injection');

// Setup runs in a `before.each` guard: uvu 0.5 ignores errors thrown by `before` hooks.
let ready: Promise<void> | undefined;
test.before.each((ctx) => (ready ??= setup(ctx)));
async function setup(ctx: Ctx): Promise<void> {
  const registry = new PluginRegistry({ builtins: false });
  registry.register(plugin.name, plugin);
  ctx.a = await createTransferEngine({ connector: plugin.name }, { registry });
  ctx.b = await createTransferEngine({ connector: plugin.name }, { registry });
  ctx.src = pattern(64 * 1024, 1);
  ctx.dst = new Uint8Array(64 * 1024);
  ctx.local = (await ctx.a.registerMemory(ctx.src)).addr;
  ctx.remote = (await ctx.b.registerMemory(ctx.dst)).addr;
}
test.after(async (ctx) => {
  await ctx.a?.close();
  await ctx.b?.close();
});
test.after.each((ctx) => {
  faults.reset();
  ctx.dst.fill(0);
});

// A batch ended by the transport's own 100 ms deadline settles well before this; one the
// transport failed to end is ended by the engine's watchdog at the deadline plus 2 s of grace
// (2.1 s). The bound sits between the two, leaving 1.4 s of slack for a loaded machine.
const ENDED_BY_DEADLINE_MS = 1_500;

function stripes(local: bigint, remote: bigint, n: number, size: number) {
  const b = allocateBatch(n);
  for (let i = 0; i < n; i++) {
    b.opcodes[i] = 1;
    b.localAddrs[i] = local + BigInt(i * size);
    b.remoteAddrs[i] = remote + BigInt(i * size);
    b.lengths[i] = BigInt(size);
  }
  return b;
}

test('fail the N-th request: only that request fails, its status says why', async ({ a, b, src, dst, local, remote }) => {
  faults.failRequest(3, NATIVE_STATUS.CONNECTION_LOST);
  try {
    await a.transfer(b.segmentName, stripes(local, remote, 8, 1024));
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'CONNECTION_LOST'), String(e));
    assert.equal([...e.statuses!], [0, 0, NATIVE_STATUS.CONNECTION_LOST, 0, 0, 0, 0, 0]);
    assert.match(e.message, /1 of 8 requests .* failed; first: request 2/);
  }
  assert.equal(dst.subarray(0, 2048), src.subarray(0, 2048));
  assert.equal(dst.subarray(2048, 3072), new Uint8Array(1024), 'the failed request wrote nothing');
  assert.equal(dst.subarray(3072, 8192), src.subarray(3072, 8192));
});

test('never complete: the deadline ends the batch and nothing lands', async ({ a, b, dst, local, remote }) => {
  faults.neverComplete = true;
  const started = Date.now();
  try {
    await a.write(b.segmentName, local, remote, 4096, { timeoutMs: 100 });
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
  }
  const ms = Date.now() - started;
  assert.ok(ms < ENDED_BY_DEADLINE_MS, `the transport's deadline, not the watchdog, ended it (${ms} ms)`);
  faults.neverComplete = false;
  assert.equal(dst.subarray(0, 4096), new Uint8Array(4096));
});

test('write early: bytes land at submit; a batch past its deadline still reports TIMEOUT, never success', async ({ a, b, src, dst, local, remote }) => {
  faults.writeEarly = true;
  // Far past the deadline, so that "ended by the deadline" needs no tight clock bound.
  faults.latencyMs = 5_000;
  const started = Date.now();
  const err = await a.write(b.segmentName, local, remote, 4096, { timeoutMs: 100 }).then(
    () => undefined,
    (e) => e,
  );
  assert.ok(isTransferError(err, 'TIMEOUT'), String(err));
  const ms = Date.now() - started;
  assert.ok(ms < ENDED_BY_DEADLINE_MS, `the transport's deadline, not the watchdog or the completion 5 s in, ended it (${ms} ms)`);
  assert.equal(dst.subarray(0, 4096), src.subarray(0, 4096), 'the bytes had landed before the deadline');
  // Within its deadline the same batch succeeds with the data in place.
  dst.fill(0);
  faults.latencyMs = 20;
  const r = await a.write(b.segmentName, local, remote, 4096);
  assert.is(r.bytes, 4096n);
  assert.equal(dst.subarray(0, 4096), src.subarray(0, 4096));
});

test('out-of-order completion: each batch still gets its own result', async ({ a, b, src, dst, local, remote }) => {
  faults.outOfOrder = true;
  const order: number[] = [];
  const first = a.write(b.segmentName, local, remote, 1024).then(() => order.push(1));
  const second = a.write(b.segmentName, local + 1024n, remote + 1024n, 1024).then(() => order.push(2));
  await Promise.all([first, second]);
  assert.equal(order, [2, 1], 'the later batch finished first');
  assert.equal(dst.subarray(0, 2048), src.subarray(0, 2048));
});

test('drop a peer: in-flight and later batches fail with PEER_FAILED; the peer is forgotten', async ({ a, b, local, remote }) => {
  // The batch is submitted and cannot complete on its own: the drop is what ends it.
  faults.neverComplete = true;
  const submitted = faults.untilBatches(faults.batches + 1);
  const inFlight = a.write(b.segmentName, local, remote, 1024);
  await submitted;
  faults.dropPeer(b.segmentName);
  try {
    await inFlight;
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'PEER_FAILED'), String(e));
  }
  try {
    await a.write(b.segmentName, local, remote, 1024);
    assert.unreachable();
  } catch (e) {
    assert.ok(isTransferError(e, 'PEER_FAILED'));
  }
  faults.restorePeer(b.segmentName);
  faults.neverComplete = false;
  await a.write(b.segmentName, local, remote, 1024);
});

test('notification follows data even when the batch is split over two transports', async () => {
  // One engine holding two fake transports (SGLang's split): device memory over a GPU-class
  // fake without notifications, host memory over a TCP-class one. The notification may only
  // leave once both parts landed, whichever part is slower.
  const gpu = createFakePlugin({ name: 'split-gpu', class: 'intra-nvlink', memoryKinds: ['cuda'], notifications: false });
  const tcp = createFakePlugin({ name: 'split-tcp', class: 'tcp', memoryKinds: ['cpu'] });
  const registry = new PluginRegistry({ builtins: false });
  for (const p of [gpu, tcp]) registry.register(p.plugin.name, p.plugin);
  const config = { connector: gpu.plugin.name, transports: [tcp.plugin.name] };
  const x = await createTransferEngine(config, { registry });
  const y = await createTransferEngine(config, { registry });
  try {
    const gpuSrc = allocFakeDeviceMemory(4096);
    const gpuDst = allocFakeDeviceMemory(4096);
    const hostSrc = pattern(512, 2);
    const hostDst = new Uint8Array(512);
    await x.registerMemory({ addr: gpuSrc.addr, length: 4096n, device: 'cuda:0' });
    await y.registerMemory({ addr: gpuDst.addr, length: 4096n, device: 'cuda:0' });
    const hs = await x.registerMemory(hostSrc);
    const hd = await y.registerMemory(hostDst);
    // What the target had when each notification arrived.
    const seen: { payload: string; gpuLanded: boolean; hostLanded: boolean }[] = [];
    y.onNotification((n) =>
      seen.push({ payload: new TextDecoder().decode(n.payload), gpuLanded: equal(gpuDst.bytes, gpuSrc.bytes), hostLanded: equal(hostDst, hostSrc) }),
    );
    for (const [gpuMs, tcpMs] of [
      [60, 0],
      [0, 60],
    ] as const) {
      gpuSrc.bytes.set(pattern(4096, gpuMs + 3));
      gpuDst.bytes.fill(0);
      hostDst.fill(0);
      seen.length = 0;
      gpu.faults.latencyMs = gpuMs;
      tcp.faults.latencyMs = tcpMs;
      const before = { gpu: gpu.faults.batches, tcp: tcp.faults.batches };
      await x.transfer(
        y.segmentName,
        batchOf([
          { op: 'write', local: gpuSrc.addr, remote: gpuDst.addr, length: 4096 },
          { op: 'write', local: hs.addr, remote: hd.addr, length: 512 },
        ]),
        { notify: new TextEncoder().encode(`done ${gpuMs}/${tcpMs}`) },
      );
      const label = `GPU part ${gpuMs} ms, TCP part ${tcpMs} ms`;
      assert.is(gpu.faults.batches - before.gpu, 1, `${label}: one batch over the GPU-class transport`);
      assert.ok(tcp.faults.batches - before.tcp >= 1, `${label}: the host part went over the TCP-class transport`);
      assert.equal(seen, [{ payload: `done ${gpuMs}/${tcpMs}`, gpuLanded: true, hostLanded: true }], `${label}: one notification, after both parts landed`);
    }
  } finally {
    gpu.faults.reset();
    tcp.faults.reset();
    await x.close();
    await y.close();
  }
});

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

test.run();
