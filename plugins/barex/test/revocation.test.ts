// Pool memory and revocation: a region's key dies with its registration even though the
// pool stays registered, so a peer holding a stale descriptor cannot write into pool
// memory that was freed and handed to someone else. Two bare transports in this process
// (different epochs, so every byte goes through the provider), both loopback providers.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash, randomBytes } from 'node:crypto';
import { batchOf, parseOptions, type SegmentDescriptor, type Transport, type WireValue } from '@te/connector';
import plugin, { allocate, free } from '../src/index.js';
import { POOL, PROVIDERS } from './helpers.js';

async function bare(provider: string, extra: Record<string, unknown> = {}): Promise<{ transport: Transport; name: string; epoch: bigint }> {
  const epoch = randomBytes(8).readBigUInt64LE() | 1n;
  const name = `bare-${randomBytes(3).toString('hex')}`;
  const options = parseOptions(plugin.options, { provider, poolSize: POOL, ...extra }, {}, plugin.name);
  const transport = await plugin.create({ segmentName: name, epoch, bindAddress: '127.0.0.1', connectTimeoutMs: 2000, env: {}, log: () => {} }, options);
  return { transport, name, epoch };
}

function descriptor(side: { transport: Transport; name: string; epoch: bigint }, addr: bigint, length: number, attrs: unknown): SegmentDescriptor {
  return {
    version: 1,
    name: side.name,
    epoch: side.epoch,
    hostname: 'localhost',
    pid: process.pid,
    transports: { [plugin.name]: { class: 'rdma', memoryKinds: ['cpu'], endpoint: side.transport.endpoint() } },
    buffers: [{ addr, length: BigInt(length), device: 'cpu', attrs: { [plugin.name]: attrs as WireValue } }],
  };
}

/** Pool memory of `size` bytes filled with `fill`, registered with `transport`. */
async function filledRegion(transport: Transport, size: number, fill: number, remoteAccess: boolean) {
  const memory = allocate(size);
  memory.buffer.fill(fill);
  const reg = await transport.registerMemory({ buffer: memory.buffer, length: BigInt(size), device: 'cpu', remoteAccess });
  return { buffer: memory.buffer, addr: reg.addr, attrs: reg.attrs };
}

async function outcome(p: Promise<{ statuses?: Int32Array }>): Promise<string> {
  return p.then(
    (r) => (r.statuses?.some((s) => s !== 0) ? `status ${r.statuses.find((s) => s !== 0)}` : 'OK'),
    (e: { code?: string }) => e.code ?? String(e),
  );
}

for (const provider of PROVIDERS) {
  test(`${provider}: a stale key of freed and reused pool memory does not write into its new owner`, async () => {
    const t = await bare(provider);
    const i = await bare(provider);
    const size = 64 * 1024;
    try {
      const local = await filledRegion(i.transport, size, 0x11, false);
      const ra = await filledRegion(t.transport, size, 0x5a, true);
      const stale = descriptor(t, ra.addr, size, ra.attrs);
      const peer = await i.transport.openPeer(stale);
      const write = batchOf([{ op: 'write', local: local.addr, remote: ra.addr, length: 4096 }]);
      assert.is(await outcome(i.transport.submit(peer, write, { timeoutMs: 3000 })), 'OK');
      assert.is(ra.buffer[0], 0x11, 'the live key writes');

      // The owner frees the region; the pool hands the same memory to a new region.
      await t.transport.unregisterMemory(ra.addr);
      free(ra.addr);
      const b = allocate(size);
      assert.is(b.addr, ra.addr, 'first fit returns the same memory');
      b.buffer.fill(0x77);
      await t.transport.registerMemory({ buffer: b.buffer, length: BigInt(size), device: 'cpu', remoteAccess: true });

      // A peer that still holds the old descriptor (opened from a stale copy) writes with the old key.
      const again = await i.transport.openPeer(stale);
      const c = await outcome(i.transport.submit(again, write, { timeoutMs: 3000 }));
      assert.ok(c !== 'OK', 'the stale key was refused');
      assert.ok(['MEMORY_NOT_REGISTERED', 'CONNECTION_LOST', 'TRANSFER_FAILED', 'status -3'].includes(c), `got ${c}`);
      assert.ok(
        b.buffer.every((x) => x === 0x77),
        "the new owner's bytes are untouched",
      );
    } finally {
      await i.transport.close();
      await t.transport.close();
    }
  });
}

for (const provider of PROVIDERS) {
  test(`${provider}: unregister returns only after the peer drained its writes into the region; queued ones are refused`, async () => {
    const t = await bare(provider);
    const i = await bare(provider, { window: 1, sliceSize: 4096 });
    const size = 8 * 1024 * 1024;
    try {
      const local = await filledRegion(i.transport, size, 0x22, false);
      const reg = await filledRegion(t.transport, size, 0, true);
      const peer = await i.transport.openPeer(descriptor(t, reg.addr, size, reg.attrs));
      const chunk = 4096;
      const reqs = Array.from({ length: size / chunk }, (_, k) => ({
        op: 'write' as const,
        local: local.addr + BigInt(k * chunk),
        remote: reg.addr + BigInt(k * chunk),
        length: chunk,
      }));
      const batch = i.transport.submit(peer, batchOf(reqs), { timeoutMs: 10_000 });
      // Revoke once writes are landing (the first byte arrived), with most still queued
      // (window 1, 2048 requests): an event, where a 2 ms sleep left it to the scheduler.
      for (const until = Date.now() + 10_000; reg.buffer[0] !== 0x22 && Date.now() < until;) await new Promise((r) => setImmediate(r));
      assert.is(reg.buffer[0], 0x22, 'no write landed within 10 s');
      await t.transport.unregisterMemory(reg.addr);
      const atReturn = createHash('sha256').update(reg.buffer).digest('hex');
      const result = await batch.then(
        (r) => r.statuses,
        (e: { details?: { statuses?: Int32Array }; code?: string }) => e.details?.statuses ?? e.code,
      );
      // The batch settled: nothing may land any more. A transport that broke that promise
      // would show it within this window (a grace for a bug to surface, not a wait for success).
      await new Promise((r) => setTimeout(r, 300));
      assert.is(createHash('sha256').update(reg.buffer).digest('hex'), atReturn, 'bytes landed after unregisterMemory returned');
      if (result instanceof Int32Array) {
        // Exact whatever the timing: a request reported done landed whole. (How many were still
        // queued at the revocation depends on the scheduler: the test used to require some to be
        // refused, and failed on a busy host where all 2048 had landed first. A revoked batch
        // reports every request refused, those that landed included: failure is claimed for
        // bytes that landed, never success for bytes that did not.)
        for (let k = 0; k < result.length; k++) {
          if (result[k] !== 0) continue;
          assert.ok(
            reg.buffer.subarray(k * chunk, (k + 1) * chunk).every((x) => x === 0x22),
            `request ${k} was reported done but did not land whole`,
          );
        }
        const landed = result.filter((_, k) => reg.buffer[k * chunk] === 0x22).length;
        if (landed < result.length)
          assert.ok(
            result.some((x) => x !== 0),
            `${result.length - landed} writes did not land, yet the batch succeeded`,
          );
        else console.log(`  ${provider}: all ${result.length} writes landed before the revocation; none was left to refuse`);
      }
    } finally {
      await i.transport.close();
      await t.transport.close();
    }
  });
}

for (const provider of PROVIDERS) {
  test(`${provider}: a revocation to a peer whose endpoint is gone neither crashes nor holds up other messages`, async () => {
    // ofi_rxm answers "again" to every send to a peer it cannot connect to. The revocation
    // gives that peer up while its REVOKE is still queued; the AV entry used to be removed
    // at once and the next send attempt crashed inside the provider (SIGSEGV in fi_send).
    const t = await bare(provider);
    const gone = await bare(provider);
    const other = await bare(provider);
    const size = 4096;
    try {
      const a = allocate(size);
      const reg = await t.transport.registerMemory({ buffer: a.buffer, length: BigInt(size), device: 'cpu', remoteAccess: true });
      await gone.transport.openPeer(descriptor(t, reg.addr, size, reg.attrs));
      await gone.transport.close();
      await new Promise((r) => setTimeout(r, 300)); // t's provider notices the closed connection
      await t.transport.unregisterMemory(reg.addr);
      // While the REVOKE to the gone peer is retried (up to its deadline), t still answers
      // a new peer: its hello and a write land.
      const rb = await filledRegion(t.transport, size, 0, true);
      const local = await filledRegion(other.transport, size, 0x3c, false);
      const started = Date.now();
      const peer = await other.transport.openPeer(descriptor(t, rb.addr, size, rb.attrs));
      const write = batchOf([{ op: 'write', local: local.addr, remote: rb.addr, length: size }]);
      assert.is(await outcome(other.transport.submit(peer, write, { timeoutMs: 3000 })), 'OK');
      assert.ok(
        rb.buffer.every((x) => x === 0x3c),
        'the write landed',
      );
      assert.ok(Date.now() - started < 1000, `a new peer waited ${Date.now() - started} ms behind the gone one`);
      // Past the REVOKE's deadline and the address's grace period the rail keeps working.
      await new Promise((r) => setTimeout(r, 2500));
      local.buffer.fill(0x4d);
      assert.is(await outcome(other.transport.submit(peer, write, { timeoutMs: 3000 })), 'OK');
      assert.ok(
        rb.buffer.every((x) => x === 0x4d),
        'a later write landed',
      );
    } finally {
      await other.transport.close();
      await t.transport.close();
    }
  });
}

test('remote keys are random, not a sequence a peer could walk', async () => {
  const t = await bare(PROVIDERS[0]);
  try {
    const keys: bigint[] = [];
    for (let k = 0; k < 4; k++) {
      const a = allocate(4096);
      const r = await t.transport.registerMemory({ buffer: a.buffer, length: 4096n, device: 'cpu', remoteAccess: true });
      keys.push(...(r.attrs as { keys: bigint[] }).keys);
    }
    const steps = keys.slice(1).map((k, j) => k - keys[j]!);
    assert.ok(
      steps.some((d) => d !== 1n && d !== -1n),
      `keys ${keys.join(', ')} form a sequence`,
    );
    assert.ok(keys.filter((k) => k < 1n << 32n).length <= 1, `keys ${keys.join(', ')} are small numbers`);
  } finally {
    await t.transport.close();
  }
});

test('a peer that stopped answering costs one revocation wait, not one per unregistration', async () => {
  const t = await bare(PROVIDERS[0]);
  const gone = await bare(PROVIDERS[0]);
  const size = 4096;
  try {
    const a = allocate(size);
    const reg = await t.transport.registerMemory({ buffer: a.buffer, length: BigInt(size), device: 'cpu', remoteAccess: true });
    await gone.transport.openPeer(descriptor(t, reg.addr, size, reg.attrs)); // its hello makes t remember it
    await gone.transport.close();
    const timed = async (addr: bigint) => {
      const started = Date.now();
      await t.transport.unregisterMemory(addr);
      return Date.now() - started;
    };
    const first = await timed(reg.addr);
    const regions = [];
    for (let k = 0; k < 3; k++) {
      const b = allocate(size);
      regions.push(await t.transport.registerMemory({ buffer: b.buffer, length: BigInt(size), device: 'cpu', remoteAccess: true }));
    }
    const later = [];
    for (const r of regions) later.push(await timed(r.addr));
    assert.ok(first >= 500, `the first revocation waited for the silent peer (${first} ms)`);
    assert.ok(Math.max(...later) < 300, `later revocations no longer wait for it: ${later.join(', ')} ms`);
  } finally {
    await t.transport.close();
  }
});

test.run();
