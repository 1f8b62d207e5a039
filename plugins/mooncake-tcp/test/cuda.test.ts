// CUDA staging. Without a GPU (this machine kind) only the refusal path runs: registering
// cuda:N memory fails with NO_DEVICE naming the failing CUDA call and error (or
// MEMORY_KIND_UNSUPPORTED when the addon was built without the toolkit), through the plugin
// and through an engine, and host transfers are unaffected. With a GPU the device cases run
// (in one process, two transports over loopback, plus the same-process path); the
// two-process run with bandwidth is test/gpu/run.sh at the repository root.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, createTransferEngine, NATIVE_STATUS, parseOptions, type SegmentDescriptor, type Transport } from '@te/connector';
import plugin, { deviceMemory } from '../src/index.js';
import { loadBinding } from '../src/binding.js';
import { hash, KiB, MiB, pattern, rejectsWith, withLocalTransport } from './helpers.js';

const native = loadBinding();
const cuda = native.probeCuda();
const gpu = cuda.devices.length > 0;
const FAKE = 0x7f0000000000n;

const noDevice = (name: string, body: () => Promise<void> | void) => {
  if (!gpu) test(name, body);
  else {
    console.log(`  skipped "${name}": a GPU is present (this case checks the no-device path)`);
    test.skip(name, body);
  }
};
const gpuTest = (name: string, body: () => Promise<void>) => {
  if (gpu) test(name, body);
  else {
    console.log(`  skipped "${name}": ${cuda.builtWithCuda ? cuda.reason : 'built without CUDA'}`);
    test.skip(name, body);
  }
};

/** The error registering cuda:0 memory gives here: NO_DEVICE with the CUDA reason, or "built without CUDA". */
function expectNoDevice(err: Error & { code: string; status?: number }, prefix: string): void {
  if (native.builtWithCuda) {
    assert.is(err.code, 'NO_DEVICE');
    assert.is(err.status, NATIVE_STATUS.NO_DEVICE);
    assert.match(err.message, new RegExp(`${prefix}no CUDA device: `));
    // The failing call and the CUDA error name from te_cuda's probe.
    assert.match(err.message, /cudaGetDeviceCount failed: cudaError\w+ \(|cudaGetDeviceCount reports 0 devices|libcuda\.so\.1/);
    assert.is(err.message.slice(err.message.indexOf('no CUDA device')), cuda.reason);
  } else {
    assert.is(err.code, 'MEMORY_KIND_UNSUPPORTED');
    assert.match(err.message, /built without CUDA/);
  }
}

test('capabilities: cpu and cuda; the addon says whether it was built with CUDA', () => {
  assert.equal(plugin.capabilities.memoryKinds, ['cpu', 'cuda']);
  assert.type(native.builtWithCuda, 'boolean');
  assert.type(cuda.reason, 'string');
  if (native.builtWithCuda) assert.ok(cuda.toolkitVersion.length > 0, 'toolkit version recorded');
  const p = plugin.probe!() as { available: boolean; details?: { cuda?: string } };
  assert.is(p.available, true, 'host memory works without a GPU');
  assert.type(p.details?.cuda, 'string');
  console.log(`  built with CUDA: ${native.builtWithCuda}; probe: ${p.details?.cuda}`);
});

noDevice('registering cuda:0 memory through the plugin: NO_DEVICE with the failing CUDA call', async () => {
  await withLocalTransport(64 * KiB, {}, async (l) => {
    const err = await rejectsWith(l.transport.registerMemory({ addr: FAKE, length: 4096n, device: 'cuda:0', remoteAccess: true }), [
      'NO_DEVICE',
      'MEMORY_KIND_UNSUPPORTED',
    ]);
    expectNoDevice(err, '\\[mooncake-tcp\\] ');
    console.log(`  ${err.code}: ${err.message}`);
    // Nothing was registered: the same range as host memory is free, and host transfers still work.
    const again = await rejectsWith(l.transport.registerMemory({ addr: FAKE, length: 4096n, device: 'cuda:1', remoteAccess: true }), [
      'NO_DEVICE',
      'MEMORY_KIND_UNSUPPORTED',
    ]);
    assert.is(again.code, err.code);
    const self: SegmentDescriptor = {
      version: 1,
      name: 'self',
      epoch: l.epoch,
      hostname: 'x',
      pid: process.pid,
      transports: { [plugin.name]: { class: 'tcp', memoryKinds: ['cpu', 'cuda'], endpoint: l.transport.endpoint() } },
      buffers: [],
    };
    const peer = await l.transport.openPeer(self);
    l.buffer.set(pattern(3, 4 * KiB), 0);
    const r = await l.transport.submit(peer, batchOf([{ op: 'write', local: l.addr, remote: l.addr + 8192n, length: 4096 }]), { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [0]);
    assert.is(hash(l.buffer.subarray(8192, 8192 + 4096)), hash(pattern(3, 4 * KiB)));
  });
});

noDevice('registering cuda:0 memory through an engine: NO_DEVICE, nothing registered or published', async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-tcp' }, { env: {} });
  try {
    const err = await rejectsWith(engine.registerMemory({ addr: FAKE, length: 4096n, device: 'cuda:0' }), ['NO_DEVICE', 'MEMORY_KIND_UNSUPPORTED']);
    expectNoDevice(err, '\\[mooncake-tcp\\] ');
    assert.equal(engine.registeredMemory(), []);
    assert.equal(engine.descriptor().buffers, []);
    assert.equal(engine.descriptor().transports['mooncake-tcp']!.memoryKinds, ['cpu', 'cuda']);
    // Host memory is unaffected.
    const h = await engine.registerMemory(new Uint8Array(4096));
    assert.is(engine.registeredMemory().length, 1);
    await engine.unregisterMemory(h);
  } finally {
    await engine.close();
  }
});

noDevice('device memory helpers fail with NO_DEVICE (or built without CUDA)', () => {
  assert.throws(
    () => deviceMemory.alloc(4096),
    (e: Error & { code: string }) => e.code === 'NO_DEVICE' && /no CUDA device/.test(e.message),
  );
});

test('device registration argument checks', async () => {
  await withLocalTransport(4 * KiB, {}, async (l) => {
    await rejectsWith(l.transport.registerMemory({ buffer: new Uint8Array(16), length: 16n, device: 'cuda:0', remoteAccess: true }), 'INVALID_ARGUMENT');
    await rejectsWith(l.transport.registerMemory({ length: 16n, device: 'cuda:0', remoteAccess: true }), 'INVALID_ARGUMENT');
    await rejectsWith(l.transport.registerMemory({ addr: FAKE, length: 16n, device: 'gpu0' as never, remoteAccess: true }), 'INVALID_ARGUMENT');
  });
});

// ---------------------------------------------------------------- GPU only

async function makeTransport(
  name: string,
  options: Record<string, unknown> = {},
): Promise<{ transport: Transport; epoch: bigint; descriptor(buffers: SegmentDescriptor['buffers']): SegmentDescriptor }> {
  const epoch = BigInt(Date.now()) * 1000n + BigInt(Math.floor(Math.random() * 1000)) + 1n;
  const transport = await plugin.create(
    { segmentName: name, epoch, bindAddress: '127.0.0.1', connectTimeoutMs: 3000, env: {}, log: () => {} },
    parseOptions(plugin.options, options, {}, plugin.name),
  );
  return {
    transport,
    epoch,
    descriptor: (buffers) => ({
      version: 1,
      name,
      epoch,
      hostname: 'x',
      pid: process.pid,
      transports: { [plugin.name]: { class: 'tcp', memoryKinds: ['cpu', 'cuda'], endpoint: transport.endpoint() } },
      buffers,
    }),
  };
}

gpuTest('device memory on both sides over loopback: write and read 1 B … 32 MiB, verified on the host', async () => {
  const REGION = 40 * MiB;
  const a = await makeTransport('gpu-a', { sliceSize: MiB });
  const b = await makeTransport('gpu-b', { sliceSize: 256 * KiB }); // target slices smaller than the initiator's: chunked staging
  const src = deviceMemory.alloc(REGION);
  const dst = deviceMemory.alloc(REGION);
  try {
    await a.transport.registerMemory({ addr: src, length: BigInt(REGION), device: 'cuda:0', remoteAccess: true });
    await b.transport.registerMemory({ addr: dst, length: BigInt(REGION), device: 'cuda:0', remoteAccess: true });
    const peer = await a.transport.openPeer(b.descriptor([{ addr: dst, length: BigInt(REGION), device: 'cuda:0', attrs: {} }]));
    let seed = 11;
    for (const size of [1, 4 * KiB + 3, 64 * KiB, MiB + 1, 32 * MiB]) {
      const off = size < MiB ? 4096 + 7 : 0;
      const data = pattern(seed++, size);
      deviceMemory.write(src, data);
      deviceMemory.fill(dst, 0, size + off + 4096);
      const w = await a.transport.submit(peer, batchOf([{ op: 'write', local: src, remote: dst + BigInt(off), length: size }]), { timeoutMs: 20000 });
      assert.equal(Array.from(w.statuses), [0]);
      assert.is(hash(deviceMemory.read(dst + BigInt(off), size)), hash(data), `write of ${size} B`);
      assert.is(hash(deviceMemory.read(dst + BigInt(off + size), 4096)), hash(new Uint8Array(4096)), `nothing after the ${size} B write`);
      const back = pattern(seed++, size);
      deviceMemory.write(dst + BigInt(off), back);
      deviceMemory.fill(src, 0, size);
      const r = await a.transport.submit(peer, batchOf([{ op: 'read', local: src, remote: dst + BigInt(off), length: size }]), { timeoutMs: 20000 });
      assert.equal(Array.from(r.statuses), [0]);
      assert.is(hash(deviceMemory.read(src, size)), hash(back), `read of ${size} B`);
    }
    const bad = await a.transport.submit(peer, batchOf([{ op: 'write', local: src, remote: dst + BigInt(REGION) - 100n, length: 4096 }]), { timeoutMs: 5000 });
    assert.equal(Array.from(bad.statuses), [NATIVE_STATUS.ADDRESS_OUT_OF_RANGE]);
    await a.transport.closePeer(peer);
  } finally {
    await a.transport.close();
    await b.transport.close();
    deviceMemory.free(src);
    deviceMemory.free(dst);
  }
});

gpuTest('host <-> device and the same-process path (cudaMemcpyDefault)', async () => {
  const a = await makeTransport('gpu-self');
  const dev = deviceMemory.alloc(4 * MiB);
  const host = new Uint8Array(4 * MiB);
  try {
    await a.transport.registerMemory({ addr: dev, length: BigInt(4 * MiB), device: 'cuda:0', remoteAccess: true });
    const h = await a.transport.registerMemory({ buffer: host, length: BigInt(host.length), device: 'cpu', remoteAccess: true });
    const peer = await a.transport.openPeer(a.descriptor([]));
    const data = pattern(5, 3 * MiB + 5);
    host.set(data, 0);
    const w = await a.transport.submit(peer, batchOf([{ op: 'write', local: h.addr, remote: dev, length: data.length }]), { timeoutMs: 5000 });
    assert.equal(Array.from(w.statuses), [0]);
    assert.is(hash(deviceMemory.read(dev, data.length)), hash(data));
    host.fill(0);
    const r = await a.transport.submit(peer, batchOf([{ op: 'read', local: h.addr, remote: dev, length: data.length }]), { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [0]);
    assert.is(hash(host.subarray(0, data.length)), hash(data));
    // Not device memory / wrong device / past the allocation.
    await rejectsWith(
      a.transport.registerMemory({ addr: h.addr + BigInt(host.length) + 4096n, length: 16n, device: 'cuda:0', remoteAccess: true }),
      'MEMORY_KIND_UNSUPPORTED',
    );
    const other = deviceMemory.alloc(MiB);
    try {
      await rejectsWith(a.transport.registerMemory({ addr: other, length: BigInt(2 * MiB), device: 'cuda:0', remoteAccess: true }), 'ADDRESS_OUT_OF_RANGE');
    } finally {
      deviceMemory.free(other);
    }
    await a.transport.closePeer(peer);
  } finally {
    await a.transport.close();
    deviceMemory.free(dev);
  }
});

test.run();
