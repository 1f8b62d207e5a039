// Conformance cases that move data: registration, writes of every size, reads, large
// scattered batches, concurrent callers.
import * as assert from 'uvu/assert';
import { OP_READ, OP_WRITE, allocateBatch } from '@te/connector';
import { assertBytes, hostMemory, pattern, rejectsWith } from '../expect.js';
import type { CaseRegistry } from './registry.js';

/** Registration, then single requests: writes of every size up to `maxBytes`, a read. */
export function singleRequestCases({ it, maxBytes }: CaseRegistry): void {
  it('register: published, overlap refused, unregistered', async ({ initiator }) => {
    const h = await hostMemory(initiator, 8192);
    assert.ok(initiator.descriptor().buffers.some((b) => b.addr === h.addr && b.length === 8192n));
    await rejectsWith(initiator.registerMemory({ addr: h.addr + 100n, length: 10n }), ['MEMORY_OVERLAP']);
    await initiator.freeMemory(h);
    assert.not.ok(initiator.descriptor().buffers.some((b) => b.addr === h.addr));
    await rejectsWith(initiator.unregisterMemory(h.addr), ['MEMORY_NOT_REGISTERED']);
  });

  it('write: sizes land byte for byte', async ({ initiator, target, targetMemory }) => {
    const sizes = [1, 7, 4096, 65_537, maxBytes];
    const local = await hostMemory(initiator, maxBytes);
    const src = local.buffer;
    const remote = await targetMemory.alloc(maxBytes + 64, { fill: 0xee });
    try {
      for (const [k, size] of sizes.entries()) {
        src.set(pattern(size, k + 1));
        await initiator.write(target, local.addr, remote + 32n, size);
        const landed = await targetMemory.read(remote, size + 64);
        assertBytes(landed.subarray(32, 32 + size), pattern(size, k + 1), `payload of ${size} bytes`);
        assertBytes(landed.subarray(0, 32), new Uint8Array(32).fill(0xee), 'bytes before the range untouched');
        if (k === 0) assert.is(landed[33], 0xee, 'byte after a 1-byte write untouched');
      }
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });

  it('read: remote bytes arrive', async ({ initiator, target, targetMemory }) => {
    const size = Math.min(maxBytes, 256 * 1024);
    const remote = await targetMemory.alloc(size);
    await targetMemory.write(remote, pattern(size, 99));
    const local = await hostMemory(initiator, size);
    const dst = local.buffer;
    try {
      await initiator.read(target, local.addr, remote, size);
      assertBytes(dst, pattern(size, 99));
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });
}

/** Many requests at once: one large scattered batch, and several callers' batches concurrently. */
export function batchCases({ it, options }: CaseRegistry): void {
  it('batch: 1000 scattered requests, mixed read and write when supported', async ({ initiator, target, targetMemory }) => {
    const n = 1000;
    const item = 64;
    const src = pattern(n * item, 7);
    const local = await hostMemory(initiator, n * item, src);
    const localRead = await hostMemory(initiator, n * item);
    const readBack = localRead.buffer;
    const remote = await targetMemory.alloc(n * item * 2);
    try {
      const w = allocateBatch(n);
      for (let i = 0; i < n; i++) {
        w.opcodes[i] = OP_WRITE;
        w.localAddrs[i] = local.addr + BigInt(i * item);
        w.remoteAddrs[i] = remote + BigInt((n - 1 - i) * item * 2); // reversed, strided
        w.lengths[i] = BigInt(item);
      }
      const result = await initiator.transfer(target, w);
      assert.is(result.statuses.length, n);
      assert.ok(result.statuses.every((s) => s === 0));
      const landed = await targetMemory.read(remote, n * item * 2);
      for (let i = 0; i < n; i++) {
        const at = (n - 1 - i) * item * 2;
        assertBytes(landed.subarray(at, at + item), src.subarray(i * item, (i + 1) * item), `request ${i}`);
      }
      if (options.capabilities.read) {
        const r = allocateBatch(n);
        for (let i = 0; i < n; i++) {
          r.opcodes[i] = OP_READ;
          r.localAddrs[i] = localRead.addr + BigInt(i * item);
          r.remoteAddrs[i] = w.remoteAddrs[i]!;
          r.lengths[i] = BigInt(item);
        }
        await initiator.transfer(target, r);
        assertBytes(readBack, src);
      }
    } finally {
      await initiator.freeMemory(local);
      await initiator.freeMemory(localRead);
      await targetMemory.free(remote);
    }
  });

  it('concurrent: batches from several callers at once', async ({ initiator, target, targetMemory }) => {
    const callers = 8;
    const size = 32 * 1024;
    const local = await hostMemory(initiator, callers * size);
    const src = local.buffer;
    for (let c = 0; c < callers; c++) src.set(pattern(size, 100 + c), c * size);
    const remote = await targetMemory.alloc(callers * size);
    try {
      await Promise.all(Array.from({ length: callers }, (_, c) => initiator.write(target, local.addr + BigInt(c * size), remote + BigInt(c * size), size)));
      assertBytes(await targetMemory.read(remote, callers * size), src);
    } finally {
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });
}
