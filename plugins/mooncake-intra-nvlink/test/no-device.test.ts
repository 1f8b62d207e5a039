// Runs everywhere: the addon loads, the probe names what is missing, and everything that can
// be checked without a GPU is (argument checks, descriptor parsing, the copy thread).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, batchOf, createTransferEngine, NATIVE_STATUS, parseOptions } from '@te/connector';
import plugin, { deviceMemory } from '../src/index.js';
import { loadBinding } from '../src/binding.js';
import { gpu, makeTransport, peerDescriptor, probe, rejectsWith } from './helpers.js';

const noDevice = (name: string, body: () => Promise<void> | void) => {
  if (gpu) {
    console.log(`  skipped "${name}": a GPU is present (this case checks the no-device path)`);
    test.skip(name, body);
  } else test(name, body);
};

test('addon loads everywhere and declares its surface', () => {
  const native = loadBinding();
  assert.type(native.CudaTransport, 'function');
  assert.is(native.backend, 'cuda-ipc');
  assert.is(native.statusName(NATIVE_STATUS.NO_DEVICE), 'NO_DEVICE');
  assert.equal(plugin.capabilities, { class: 'intra-nvlink', memoryKinds: ['cuda'], read: true, notifications: false, maxInFlight: 65536, rawAddresses: true });
});

noDevice('probe: unavailable, naming the failing call and the CUDA error', () => {
  assert.is(probe.available, false);
  assert.match(probe.reason!, /^no CUDA device: /);
  // Either the toolkit was missing at build time, or the runtime/driver call that failed is named.
  assert.match(probe.reason!, /cudaGetDeviceCount failed: cudaError\w+|built without CUDA|libcuda\.so\.1/);
  if (loadBinding().builtWithCuda) assert.match(probe.reason!, /libcuda\.so\.1 not found|cudaErrorInsufficientDriver|cudaErrorNoDevice/);
  console.log(`  probe reason: ${probe.reason}`);
});

noDevice('registration through an engine fails with NO_DEVICE and the probe reason', async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-intra-nvlink', transports: ['mooncake-tcp'] }, { env: {} });
  try {
    const err = await rejectsWith(engine.registerMemory({ addr: 0x7f0000000000n, length: 4096n, device: 'cuda:0' }), 'NO_DEVICE');
    assert.match(err.message, /\[mooncake-intra-nvlink\] no CUDA device: /);
    assert.is((err as { status?: number }).status, NATIVE_STATUS.NO_DEVICE);
    assert.equal(engine.registeredMemory(), []);
  } finally {
    await engine.close();
  }
});

noDevice('device memory helpers fail with NO_DEVICE', () => {
  assert.throws(
    () => deviceMemory.alloc(4096),
    (e: Error & { code: string }) => e.code === 'NO_DEVICE' && /no CUDA device/.test(e.message),
  );
});

test('host memory and JS buffers are refused with the transport to use', async () => {
  const { transport } = await makeTransport();
  try {
    const e = await rejectsWith(transport.registerMemory({ addr: 0x1000n, length: 16n, device: 'cpu', remoteAccess: true }), 'MEMORY_KIND_UNSUPPORTED');
    assert.match(e.message, /mooncake-tcp/);
    await rejectsWith(transport.registerMemory({ buffer: new Uint8Array(16), length: 16n, device: 'cuda:0', remoteAccess: true }), 'INVALID_ARGUMENT');
  } finally {
    await transport.close();
  }
});

test('options: defaults, environment names, range checks', () => {
  assert.equal(parseOptions(plugin.options, {}, {}), { streamsPerDevice: 4, sliceBytes: 64 << 20 });
  assert.equal(parseOptions(plugin.options, {}, { TE_INTRA_NVLINK_STREAMS: '2', TE_INTRA_NVLINK_SLICE_BYTES: '0' }), { streamsPerDevice: 2, sliceBytes: 0 });
  assert.throws(() => parseOptions(plugin.options, { streamsPerDevice: 0 }, {}, plugin.name), /streamsPerDevice/);
});

test('openPeer: peers on other machines, foreign descriptors and malformed attrs are refused', async () => {
  const { transport, name, epoch } = await makeTransport();
  try {
    const ep = transport.endpoint() as Record<string, unknown>;
    const far = peerDescriptor(transport, {
      transports: {
        [plugin.name]: { class: 'intra-nvlink', memoryKinds: ['cuda'], endpoint: { ...ep, host: 'elsewhere', bootId: '00000000-0000-0000-0000-000000000000' } },
      },
    });
    assert.match((await rejectsWith(transport.openPeer(far), 'PEER_UNREACHABLE')).message, /one node/);
    await rejectsWith(transport.openPeer(peerDescriptor(transport, { transports: {} })), 'NO_COMMON_TRANSPORT');
    await rejectsWith(transport.openPeer(peerDescriptor(transport, {}, { base: 1n, size: 2n, device: 0, handle: 'x' })), 'INVALID_ARGUMENT');
    await rejectsWith(
      transport.openPeer(peerDescriptor(transport, {}, { base: 0x7f0000200000n, size: 4096n, device: 0, handle: new Uint8Array(64) })),
      'INVALID_ARGUMENT',
    );
    await rejectsWith(transport.openPeer(peerDescriptor(transport, { name, epoch: epoch + 2n })), 'STALE_DESCRIPTOR');
  } finally {
    await transport.close();
  }
});

test('submit: every request is checked on the copy thread; results come back without blocking', async () => {
  const { transport } = await makeTransport();
  try {
    const peer = await transport.openPeer(peerDescriptor(transport));
    const batch = batchOf([
      { op: 'write', local: 0x1000n, remote: 0x7f0000100000n, length: 64 }, // local memory not registered
      { op: 'read', local: 0x1000n, remote: 0x7f0000100000n, length: 0 }, // empty: nothing to do
    ]);
    const r = await transport.submit(peer, batch, { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [NATIVE_STATUS.MEMORY_NOT_REGISTERED, 0]);
    assert.is(r.bytes, 0n);
    // 100k requests in one native call: the JS thread only copies the arrays; each request
    // is checked (and refused) on the copy thread, and every status comes back.
    const n = 100_000;
    const big = allocateBatch(n);
    big.opcodes.fill(1);
    big.lengths.fill(8n);
    const started = performance.now();
    const pending = transport.submit(peer, big, { timeoutMs: 10_000 });
    const blocked = performance.now() - started;
    const res = await pending;
    assert.is(res.statuses.length, n);
    assert.ok(res.statuses.every((s) => s === NATIVE_STATUS.MEMORY_NOT_REGISTERED));
    assert.is(res.bytes, 0n);
    // A hang bound, not a speed floor: submit must not wait on the copy thread (one round
    // trip per request, or for a batch the copy thread cannot finish) before it returns.
    assert.ok(blocked < 2000, `submit blocked the JS thread for ${blocked.toFixed(1)} ms`);
    await rejectsWith(transport.submit(peer, batch, { timeoutMs: 1000, notify: new Uint8Array([1]) }), 'UNSUPPORTED_CAPABILITY');
    const ac = new AbortController();
    ac.abort();
    await rejectsWith(transport.submit(peer, batch, { timeoutMs: 1000, signal: ac.signal }), 'ABORTED');
    await rejectsWith(transport.submit(peer, { ...batch, lengths: new BigUint64Array(1) }, { timeoutMs: 1000 }), 'INVALID_ARGUMENT');
    await transport.closePeer(peer);
    assert.is((transport as unknown as { importsOpen(): number }).importsOpen(), 0);
  } finally {
    await transport.close();
  }
  await rejectsWith(transport.registerMemory({ addr: 0x1000n, length: 16n, device: 'cuda:0', remoteAccess: true }), 'ABORTED');
});

test('an engine holding intra-nvlink still moves host memory (routed to mooncake-tcp)', async () => {
  const config = { connector: 'mooncake-intra-nvlink', transports: ['mooncake-tcp'], metrics: true };
  const a = await createTransferEngine(config, { env: {} });
  const b = await createTransferEngine(config, { env: {} });
  try {
    const src = new Uint8Array(4096).map((_, i) => i & 0xff);
    const dst = new Uint8Array(4096);
    const hs = await a.registerMemory(src);
    const hd = await b.registerMemory(dst);
    await a.write(b.segmentName, hs.addr, hd.addr, 4096);
    assert.equal(dst, src);
    assert.equal(a.metrics().byTransport, { 'mooncake-tcp': 1 });
    assert.ok(a.descriptor().transports['mooncake-intra-nvlink'], 'intra-nvlink is advertised');
  } finally {
    await a.close();
    await b.close();
  }
});

test.run();
