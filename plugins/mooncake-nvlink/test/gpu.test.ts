// GPU-only: the allocator, registration rules and copies through the VMM path (posix-fd
// handles on one machine; fabric handles need a multi-node NVLink system). Two processes are
// covered by test/gpu/run.sh at the repository root. Without a GPU every case is skipped
// with the probe's reason printed.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine } from '@te/connector';
import { allocateFabricMemory, deviceMemory, findFabricAllocation, freeFabricMemory } from '../src/index.js';
import { gpu, noGpuReason, rejectsWith } from './helpers.js';

const MiB = 1 << 20;
const gpuTest = (name: string, body: () => Promise<void>) => {
  if (gpu) test(name, body);
  else {
    // Counted as skipped in the totals, with the probe's reason printed.
    console.log(`  skipped "${name}": ${noGpuReason}`);
    test.skip(name, body);
  }
};
const config = { connector: 'mooncake-nvlink', transports: ['mooncake-tcp'], transportOptions: { 'mooncake-nvlink': { handleType: 'posix-fd' } } };

gpuTest('allocator: granularity-aligned posix-fd memory; freed only when unregistered', async () => {
  const a = allocateFabricMemory(3 * MiB + 5, { handleType: 'posix-fd' });
  assert.ok(a.size >= BigInt(3 * MiB + 5));
  assert.is(findFabricAllocation(a.addr + 10n)?.addr, a.addr);
  const engine = await createTransferEngine(config, { env: {} });
  try {
    const h = await engine.registerMemory({ addr: a.addr, length: a.size, device: 'cuda:0' });
    assert.throws(() => freeFabricMemory(a), /still registered/);
    await engine.unregisterMemory(h);
  } finally {
    await engine.close();
  }
  freeFabricMemory(a);
  assert.is(findFabricAllocation(a.addr), undefined);
});

gpuTest('registration of memory not from the allocator is refused', async () => {
  const plain = deviceMemory.alloc(MiB);
  const engine = await createTransferEngine(config, { env: {} });
  try {
    const e = await rejectsWith(engine.registerMemory({ addr: plain, length: MiB, device: 'cuda:0' }), 'MEMORY_KIND_UNSUPPORTED');
    assert.match(e.message, /allocateFabricMemory/);
  } finally {
    await engine.close();
    deviceMemory.free(plain);
  }
});

gpuTest('write and read through the VMM path in one process, verified on the host', async () => {
  const a = allocateFabricMemory(8 * MiB, { handleType: 'posix-fd' });
  const b = allocateFabricMemory(8 * MiB, { handleType: 'posix-fd' });
  const engine = await createTransferEngine(config, { env: {} });
  try {
    await engine.registerMemory({ addr: a.addr, length: a.size, device: 'cuda:0' });
    await engine.registerMemory({ addr: b.addr, length: b.size, device: 'cuda:0' });
    const data = new Uint8Array(8 * MiB).map((_, i) => (i * 7 + 3) & 0xff);
    deviceMemory.write(a.addr, data);
    await engine.write(engine.segmentName, a.addr, b.addr, data.length);
    assert.ok(Buffer.from(deviceMemory.read(b.addr, data.length)).equals(data));
    await rejectsWith(engine.write(engine.segmentName, a.addr, b.addr + b.size - 8n, 64), ['ADDRESS_OUT_OF_RANGE', 'MEMORY_NOT_REGISTERED']);
  } finally {
    await engine.close();
    freeFabricMemory(a);
    freeFabricMemory(b);
  }
});

test.run();
