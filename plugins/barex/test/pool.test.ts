// The BAREX model: all transfer memory from the pre-registered pool, registrations outside
// it refused, pool exhaustion typed, channels opened eagerly and checked; two processes,
// both loopback providers, every byte verified.
import { test } from 'uvu';
import { constants as bufferConstants } from 'node:buffer';
import * as assert from 'uvu/assert';
import { pattern } from '@te/testkit';
import plugin, { allocate, checkSegment, free, poolStats } from '../src/index.js';
import { MiB, POOL, PROVIDERS, extra, initiator, poolTarget } from './helpers.js';

for (const provider of PROVIDERS) {
  test(`${provider}: pool-to-pool write and read between two processes, verified; channels healthy`, async () => {
    const target = await poolTarget(provider);
    const engine = await initiator(provider);
    try {
      const size = 8 * MiB + 123;
      const src = allocate(size);
      const dst = allocate(size);
      assert.ok(src.addr >= poolStats().base && src.addr + BigInt(size) <= poolStats().base + poolStats().size, 'allocation lies in the pool');
      src.buffer.set(pattern(size, 11));
      const hs = await engine.registerMemory(src.buffer);
      const hd = await engine.registerMemory(dst.buffer);
      assert.is(hs.addr, src.addr);
      const remote = await target.alloc(size, { fill: 0 });
      await engine.write(target.segment, src.addr, remote, size);
      assert.equal(await target.read(remote, size), pattern(size, 11), 'written bytes landed in the peer pool');
      await target.write(remote, pattern(size, 12));
      await engine.read(target.segment, dst.addr, remote, size);
      assert.equal(dst.buffer, pattern(size, 12), 'read bytes arrived from the peer pool');
      // Channels were opened eagerly (hello on every rail) and answer the status check.
      const health = await checkSegment(target.segment);
      assert.ok(health.healthy, JSON.stringify(health));
      assert.ok(health.rails.length >= 1 && health.rails.every((r) => r.ok));
      const described = engine.describe()[plugin.name] as { pool: { used: bigint }; openSegments: string[]; vendorLibrary: string };
      assert.ok(described.pool.used >= BigInt(2 * size));
      assert.ok(described.openSegments.includes(target.segment));
      // A killed peer shows up as unhealthy channels.
      target.kill();
      await target.close(); // returns once the killed process has exited: its channels are gone
      const dead = await checkSegment(target.segment, 500);
      assert.not.ok(dead.healthy, JSON.stringify(dead));
      await engine.unregisterMemory(hs);
      await engine.unregisterMemory(hd);
      free(src.addr);
      free(dst.addr);
    } finally {
      await engine.close();
      await target.close();
    }
  });
}

test('memory outside the pool is refused with a clear error; pool exhaustion is POOL_EXHAUSTED', async () => {
  const engine = await initiator(PROVIDERS[0]);
  const target = await poolTarget(PROVIDERS[0]);
  try {
    const err = (await engine.registerMemory(new Uint8Array(4096)).then(
      () => undefined,
      (e) => e,
    )) as { code: string; message: string };
    assert.is(err?.code, 'INVALID_ARGUMENT');
    assert.match(err.message, /outside the barex pool/);
    assert.match(err.message, /allocate\(\)/);
    assert.match(await extra<string>(target, 'registerOutside'), /^INVALID_ARGUMENT: .*outside the barex pool/);

    const whole = (() => {
      try {
        allocate(POOL + 1);
      } catch (e) {
        return e as { code: string; message: string };
      }
    })();
    assert.is(whole?.code, 'POOL_EXHAUSTED');
    assert.match(whole!.message, /larger than the whole barex pool/);
    const taken: bigint[] = [];
    let last: { code: string; message: string } | undefined;
    for (let i = 0; i < 100 && !last; i++) {
      try {
        taken.push(allocate(8 * MiB).addr);
      } catch (e) {
        last = e as { code: string; message: string };
      }
    }
    assert.is(last?.code, 'POOL_EXHAUSTED');
    assert.match(last!.message, /barex pool exhausted: .* free of 64\.00 MiB/);
    for (const a of taken) free(a);
    assert.is(poolStats().used, 0n, 'freed memory returns to the pool (neighbours coalesced)');
    assert.ok(allocate(POOL).addr, 'the whole pool is one block again');
    free(poolStats().base);
    assert.match(await extra<string>(target, 'exhaust'), /^POOL_EXHAUSTED: /);
    // Freeing memory that is still registered is refused.
    const a = allocate(4096);
    const h = await engine.registerMemory(a.buffer);
    assert.throws(() => free(a.addr), /still registered/);
    await engine.unregisterMemory(h);
    free(a.addr);
  } finally {
    await engine.close();
    await target.close();
  }
});

// On Node 20 no ArrayBuffer is longer than 4 GiB: allocating from a larger pool threw
// Node's untyped ERR_BUFFER_TOO_LARGE after taking the allocation, so no pool memory could
// be had at all. engine.allocateMemory now serves it by address.
test('a pool longer than the longest ArrayBuffer of this Node.js: engine.allocateMemory serves it by address, allocate() says why it cannot', async () => {
  const big = 8 * 1024 * MiB; // MAP_NORESERVE: only the pages touched are used
  const target = await poolTarget(PROVIDERS[0], big);
  const engine = await initiator(PROVIDERS[0]);
  try {
    const r = JSON.parse(await extra<string>(target, 'allocateMemory', 4096)) as { addr: string; view: boolean; allocate: string };
    const viewable = big <= bufferConstants.MAX_LENGTH;
    assert.is(r.view, viewable);
    if (viewable) assert.is(r.allocate, 'OK');
    else
      assert.match(
        r.allocate,
        /^UNSUPPORTED_OPERATION: .*the barex pool \(8589934592 bytes\) is longer than the longest ArrayBuffer of this Node\.js/,
        r.allocate,
      );
    // This side's pool has a view; closing the engine returns both allocations.
    const src = await engine.allocateMemory(4096);
    const dst = await engine.allocateMemory(4096);
    src.buffer!.set(pattern(4096, 31));
    await engine.write(target.segment, src.addr, BigInt(r.addr), 4096);
    await engine.read(target.segment, dst.addr, BigInt(r.addr), 4096);
    assert.equal(dst.buffer, pattern(4096, 31), "the bytes went into the target's pool memory and back");
  } finally {
    await engine.close();
    await target.close();
  }
});

test('probe() says what the plugin is and whether accl-barex was found', async () => {
  const p = await plugin.probe!();
  assert.ok(p.available, p.reason);
  assert.match(String(p.details?.model), /implemented over libfabric .* accl-barex is not used/);
  assert.is(p.details?.vendorLibrary, 'not found at build time');
});

test('engine.allocateMemory takes pool memory; closing the engine returns it to the pool', async () => {
  const first = await initiator(PROVIDERS[0]);
  const before = poolStats().allocations;
  const a = await first.allocateMemory(4 * MiB);
  assert.ok(a.buffer && a.buffer.byteLength === 4 * MiB);
  assert.ok(a.addr >= poolStats().base && a.addr < poolStats().base + poolStats().size, 'from the pool');
  assert.is(poolStats().allocations, before + 1);
  await first.close();
  const second = await initiator(PROVIDERS[0]);
  try {
    assert.is(poolStats().allocations, before, 'the closed engine gave its allocation back');
    try {
      allocate(1.5);
      assert.unreachable();
    } catch (e) {
      assert.is((e as { code?: string }).code, 'INVALID_ARGUMENT');
    }
  } finally {
    await second.close();
  }
});
test('channels open eagerly at openSegment: the segment check is healthy before any transfer', async () => {
  const target = await poolTarget(PROVIDERS[0]);
  const engine = await initiator(PROVIDERS[0]);
  try {
    await engine.openSegment(target.segment);
    const health = await checkSegment(target.segment);
    assert.ok(health.healthy, JSON.stringify(health));
  } finally {
    await engine.close();
    await target.close();
  }
});

test.run();
