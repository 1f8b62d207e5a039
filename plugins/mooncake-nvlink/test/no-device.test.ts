// Runs everywhere: the addon loads, the probe and the allocator name what is missing, and
// what can be checked without a GPU is (options, handle-type negotiation, the fd socket).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, createTransferEngine, NATIVE_STATUS, parseOptions } from '@te/connector';
import plugin, { allocateFabricMemory, findFabricAllocation, freeFabricMemory } from '../src/index.js';
import { loadBinding } from '../src/binding.js';
import { gpu, makeTransport, peerDescriptor, probe, rejectsWith } from './helpers.js';

const noDevice = (name: string, body: () => Promise<void> | void) => {
  if (!gpu) test(name, body);
  else {
    console.log(`  skipped "${name}": a GPU is present (this case checks the no-device path)`);
    test.skip(name, body);
  }
};

test('addon loads everywhere and declares its surface', () => {
  const native = loadBinding();
  assert.type(native.CudaTransport, 'function');
  assert.type(native.allocator.allocate, 'function');
  assert.is(native.backend, 'cumem-vmm');
  assert.equal(plugin.capabilities, { class: 'nvlink', memoryKinds: ['cuda'], read: true, notifications: false, maxInFlight: 65536, rawAddresses: true });
});

noDevice('probe: unavailable, naming the failing call and the CUDA error', () => {
  assert.is(probe.available, false);
  assert.match(probe.reason!, /^no CUDA device: /);
  assert.match(probe.reason!, /cudaGetDeviceCount failed: cudaError\w+|built without CUDA|libcuda\.so\.1/);
  console.log(`  probe reason: ${probe.reason}`);
});

noDevice('allocateFabricMemory and registration fail with NO_DEVICE', async () => {
  for (const handleType of ['fabric', 'posix-fd'] as const) {
    assert.throws(
      () => allocateFabricMemory(1 << 20, { handleType }),
      (e: Error & { code: string }) => e.code === 'NO_DEVICE' && /no CUDA device/.test(e.message),
    );
  }
  const engine = await createTransferEngine(
    { connector: 'mooncake-tcp', transports: ['mooncake-nvlink'], transportOptions: { 'mooncake-nvlink': { handleType: 'posix-fd' } } },
    { env: {} },
  );
  try {
    const err = await rejectsWith(engine.registerMemory({ addr: 0x7f0000000000n, length: 4096n, device: 'cuda:0' }), 'NO_DEVICE');
    // Every transport that handles cuda memory registers it; the first one to fail says why.
    assert.match(err.message, /\[mooncake-(nvlink|tcp)\] no CUDA device: /);
  } finally {
    await engine.close();
  }
});

test('the allocator refuses bad arguments and unknown addresses', () => {
  assert.throws(
    () => allocateFabricMemory(0),
    (e: Error & { code: string }) => e.code === 'INVALID_ARGUMENT',
  );
  assert.throws(() => allocateFabricMemory(4096, { handleType: 'nccl' as never }), /handleType/);
  assert.throws(
    () => freeFabricMemory(0x1234n),
    (e: Error & { code: string }) => e.code === 'INVALID_ARGUMENT' && /allocateFabricMemory/.test(e.message),
  );
  assert.is(findFabricAllocation(0x1234n), undefined);
});

test('options: handle type, defaults and environment names', () => {
  assert.equal(parseOptions(plugin.options, {}, {}), { handleType: 'fabric', streamsPerDevice: 4, sliceBytes: 64 << 20 });
  assert.is(parseOptions(plugin.options, {}, { TE_NVLINK_HANDLE_TYPE: 'posix-fd' }).handleType, 'posix-fd');
  assert.throws(() => parseOptions(plugin.options, { handleType: 'ipc' }, {}, plugin.name), /handleType/);
});

test('posix-fd transports publish their fd socket; handle types must match across peers', async () => {
  const fd = await makeTransport({ handleType: 'posix-fd' });
  const fabric = await makeTransport({ handleType: 'fabric' });
  try {
    const ep = fd.transport.endpoint() as { socket: string; handleType: string };
    assert.is(ep.handleType, 'posix-fd');
    assert.match(ep.socket, /^te-nvlink-\d+-[0-9a-f]{16}$/);
    assert.is((fabric.transport.endpoint() as { socket: string }).socket, '');
    const e = await rejectsWith(fabric.transport.openPeer(peerDescriptor(fd.transport)), 'NO_COMMON_TRANSPORT');
    assert.match(e.message, /handleType/);
    // A fabric peer may live on another node (no same-machine check); bounds are still enforced.
    const far = peerDescriptor(fabric.transport, {
      transports: {
        [plugin.name]: { class: 'nvlink', memoryKinds: ['cuda'], endpoint: { ...(fabric.transport.endpoint() as object), host: 'node-b', bootId: 'other' } },
      },
    });
    const peer = await fabric.transport.openPeer(far);
    const r = await fabric.transport.submit(peer, batchOf([{ op: 'write', local: 0x1000n, remote: 0x7f0000100000n, length: 16 }]), { timeoutMs: 5000 });
    assert.equal(Array.from(r.statuses), [NATIVE_STATUS.MEMORY_NOT_REGISTERED]);
  } finally {
    await fd.transport.close();
    await fabric.transport.close();
  }
  assert.is(loadBinding().fdServerName(), '', 'the fd server stops with the last posix-fd transport');
});

test.run();
