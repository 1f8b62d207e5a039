// GPU-only: registration and copies on a real device, in one process (the same-process
// peer path) and against an engine's own segment. Two processes on one GPU are covered by
// test/gpu/run.sh at the repository root. Without a GPU every case is skipped with the
// probe's reason printed.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine, type TransferEngine } from '@te/connector';
import { deviceMemory } from '../src/index.js';
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

function pattern(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  const words = new Uint32Array(out.buffer, 0, n >>> 2);
  for (let i = 0; i < words.length; i++) words[i] = Math.imul(i + 1, 2654435761) ^ seed;
  for (let i = words.length * 4; i < n; i++) out[i] = (i * 31 + seed) & 0xff;
  return out;
}

async function withEngine(body: (engine: TransferEngine, a: bigint, b: bigint) => Promise<void>): Promise<void> {
  const engine = await createTransferEngine({ connector: 'mooncake-intra-nvlink', transports: ['mooncake-tcp'] }, { env: {} });
  const a = deviceMemory.alloc(16 * MiB);
  const b = deviceMemory.alloc(16 * MiB);
  try {
    await body(engine, a, b);
  } finally {
    await engine.close();
    deviceMemory.free(a);
    deviceMemory.free(b);
  }
}

gpuTest('write and read between two cudaMalloc buffers of this process, verified on the host', async () => {
  await withEngine(async (engine, a, b) => {
    const ha = await engine.registerMemory({ addr: a, length: 16 * MiB, device: 'cuda:0' });
    const hb = await engine.registerMemory({ addr: b, length: 16 * MiB, device: 'cuda:0' });
    const attrs = engine.descriptor().buffers.find((x) => x.addr === a)!.attrs['mooncake-intra-nvlink'] as { base: bigint; handle: Uint8Array };
    assert.is(attrs.base, a);
    assert.is(attrs.handle.length, 64);
    for (const [k, size] of [1, 4096, 65_537, 16 * MiB].entries()) {
      const data = pattern(size, k + 1);
      deviceMemory.write(a, data);
      await engine.write(engine.segmentName, a, b, size);
      assert.ok(Buffer.from(deviceMemory.read(b, size)).equals(data), `write of ${size} bytes`);
      deviceMemory.fill(a, 0, size);
      await engine.read(engine.segmentName, a, b, size);
      assert.ok(Buffer.from(deviceMemory.read(a, size)).equals(data), `read of ${size} bytes`);
    }
    await engine.unregisterMemory(ha);
    await engine.unregisterMemory(hb);
  });
});

gpuTest('bounds: past the registered region, unregistered memory and past the allocation are refused', async () => {
  await withEngine(async (engine, a, b) => {
    await engine.registerMemory({ addr: a, length: MiB, device: 'cuda:0' });
    await engine.registerMemory({ addr: b, length: MiB, device: 'cuda:0' });
    deviceMemory.fill(b, 0x11, MiB);
    await rejectsWith(engine.write(engine.segmentName, a, b + BigInt(MiB) - 16n, 32), ['ADDRESS_OUT_OF_RANGE', 'MEMORY_NOT_REGISTERED']);
    await rejectsWith(engine.write(engine.segmentName, a, b + 2n * BigInt(MiB), 16), ['MEMORY_NOT_REGISTERED', 'ADDRESS_OUT_OF_RANGE']);
    assert.ok(
      deviceMemory.read(b, MiB).every((x) => x === 0x11),
      'target untouched',
    );
    // One registration must lie inside one cudaMalloc allocation.
    await rejectsWith(engine.registerMemory({ addr: a + 15n * BigInt(MiB), length: 2 * MiB, device: 'cuda:0' }), ['ADDRESS_OUT_OF_RANGE', 'MEMORY_OVERLAP']);
  });
});

gpuTest('device mismatch and overlapping registrations are refused', async () => {
  await withEngine(async (engine, a) => {
    await engine.registerMemory({ addr: a, length: MiB, device: 'cuda:0' });
    await rejectsWith(engine.registerMemory({ addr: a + 100n, length: 16n, device: 'cuda:0' }), 'MEMORY_OVERLAP');
    await rejectsWith(engine.registerMemory({ addr: a + 2n * BigInt(MiB), length: 16n, device: 'cuda:63' }), ['NO_DEVICE', 'INVALID_ARGUMENT']);
  });
});

test.run();
