// Typed failures: wrong and revoked remote keys, a peer killed mid-transfer, a stalled peer
// against the per-batch deadline, and no usable provider or NIC; on both loopback providers.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash, randomBytes } from 'node:crypto';
import { batchOf, parseOptions, type SegmentDescriptor, type Transport, type TransportPeer } from '@te/connector';
import { bytesQueuedTo, until } from '@te/testkit';
import plugin from '../src/index.js';
import { MiB, PROVIDERS, bareSide, initiator, target } from './helpers.js';

interface Side {
  transport: Transport;
  descriptor: SegmentDescriptor;
  buffer: Uint8Array;
  addr: bigint;
}

/** A bare transport in this process (no engine), with one registered buffer. */
async function side(provider: string, size: number, options: Record<string, unknown> = {}): Promise<Side> {
  const buffer = new Uint8Array(size).fill(0x5a);
  const s = await bareSide(provider, [buffer], options);
  return { transport: s.transport, descriptor: s.descriptor, buffer, addr: s.addrs[0]! };
}

async function code(p: Promise<unknown>): Promise<string> {
  return p.then(
    (r) => {
      const st = (r as { statuses?: Int32Array })?.statuses?.find((x) => x !== 0);
      return st === undefined ? 'OK' : st === -3 ? 'MEMORY_NOT_REGISTERED' : st === -2 ? 'ADDRESS_OUT_OF_RANGE' : `status ${st}`;
    },
    (e: { code?: string }) => e.code ?? String(e),
  );
}

for (const provider of PROVIDERS) {
  test(`${provider}: a wrong remote key is refused by the provider → typed error, no crash, peer reopens`, async () => {
    const t = await side(provider, 64 * 1024);
    const i = await side(provider, 64 * 1024);
    try {
      const attrs = t.descriptor.buffers[0]!.attrs[plugin.name] as { keys: bigint[]; base: bigint };
      const forged = structuredClone(t.descriptor);
      forged.buffers[0]!.attrs[plugin.name] = { keys: attrs.keys.map((k) => k ^ 0x5a5a5an), base: attrs.base };
      const peer = await i.transport.openPeer(forged);
      i.buffer.fill(0x11);
      const c = await code(i.transport.submit(peer, batchOf([{ op: 'write', local: i.addr, remote: t.addr, length: 4096 }]), { timeoutMs: 3000 }));
      // Each provider reports a refused key its own way, always the same: ofi_rxm drops the
      // connection the bad RMA arrived on, sockets answers the request with FI_EACCES.
      assert.is(c, provider === 'sockets' ? 'MEMORY_NOT_REGISTERED' : 'CONNECTION_LOST');
      assert.is(t.buffer[0], 0x5a, 'nothing landed through a wrong key');
      await i.transport.closePeer(peer);
      // With the right keys the same pair works again (rxm rebuilds its connection).
      let ok = 'none';
      for (let k = 0; k < 20 && ok !== 'OK'; k++) {
        const again = await i.transport.openPeer(t.descriptor).catch(() => undefined);
        if (again) {
          ok = await code(i.transport.submit(again, batchOf([{ op: 'write', local: i.addr, remote: t.addr, length: 4096 }]), { timeoutMs: 3000 }));
          await i.transport.closePeer(again);
        }
        if (ok !== 'OK') await new Promise((r) => setTimeout(r, 50));
      }
      assert.is(ok, 'OK');
      assert.is(t.buffer[0], 0x11);
    } finally {
      await i.transport.close();
      await t.transport.close();
    }
  });

  test(`${provider}: a descriptor advertising another fabric protocol version → PROTOCOL_MISMATCH at openPeer, naming both`, async () => {
    const t = await side(provider, 64 * 1024);
    const i = await side(provider, 64 * 1024);
    try {
      // Version 1 peers send notifications without waiting for an acknowledgement; this build
      // settles a notifying batch on the ack, so the two must not be paired.
      const forged = structuredClone(t.descriptor);
      const endpoint = forged.transports[plugin.name]!.endpoint as { protocol: number };
      const own = endpoint.protocol;
      assert.ok(own >= 2, `this build advertises protocol ${own}`);
      endpoint.protocol = 1;
      const e = await i.transport.openPeer(forged).then(
        () => undefined,
        (x: { code?: string; message?: string }) => x,
      );
      assert.is(e?.code, 'PROTOCOL_MISMATCH');
      assert.match(e?.message ?? '', `protocol 1, this build speaks ${own}`);
      const peer = await i.transport.openPeer(t.descriptor);
      assert.is(await code(i.transport.submit(peer, batchOf([{ op: 'write', local: i.addr, remote: t.addr, length: 4096 }]), { timeoutMs: 3000 })), 'OK');
    } finally {
      await i.transport.close();
      await t.transport.close();
    }
  });

  test(`${provider}: a revoked key (buffer unregistered on the peer) → MEMORY_NOT_REGISTERED before posting`, async () => {
    const t = await side(provider, 64 * 1024);
    const i = await side(provider, 64 * 1024);
    try {
      const peer: TransportPeer = await i.transport.openPeer(t.descriptor);
      const one = batchOf([{ op: 'write', local: i.addr, remote: t.addr, length: 1024 }]);
      assert.is(await code(i.transport.submit(peer, one, { timeoutMs: 3000 })), 'OK');
      await t.transport.unregisterMemory(t.addr);
      t.buffer.fill(0x77);
      let c = 'OK';
      for (let k = 0; k < 50 && c === 'OK'; k++) {
        c = await code(i.transport.submit(peer, one, { timeoutMs: 3000 }));
        if (c === 'OK') await new Promise((r) => setTimeout(r, 10));
      }
      // The revocation removed the region from this side's table before unregister returned:
      // the request is refused here, before anything is posted.
      assert.is(c, 'MEMORY_NOT_REGISTERED');
      assert.is(t.buffer[0], 0x77, 'revoked memory untouched');
      // A range the peer never published is refused without a round trip to the provider.
      assert.is(
        await code(i.transport.submit(peer, batchOf([{ op: 'write', local: i.addr, remote: 0x1000n, length: 8 }]), { timeoutMs: 3000 })),
        'MEMORY_NOT_REGISTERED',
      );
    } finally {
      await i.transport.close();
      await t.transport.close();
    }
  });

  test(`${provider}: a peer killed mid-transfer fails the batch with a typed error well within its deadline`, async () => {
    const victim = await target(provider);
    const engine = await initiator(provider);
    try {
      const remote = await victim.alloc(16 * MiB);
      const local = await engine.registerMemory(new Uint8Array(16 * MiB));
      await engine.write(victim.segment, local.addr, remote, 4096);
      const reqs = Array.from({ length: 64 }, () => ({ op: 'write' as const, local: local.addr, remote, length: 16 * MiB }));
      const t0 = Date.now();
      const p = code(engine.transfer(victim.segment, batchOf(reqs), { timeoutMs: 15_000 }));
      // Killed once the batch's bytes are on their way (1 GiB: it is far from done).
      await until('the batch started moving bytes to the victim', () => bytesQueuedTo(victim.child.pid!) > 0);
      victim.kill();
      const c = await p;
      const took = Date.now() - t0;
      // Both loopback providers see the reset connection: the deadline (15 s) plays no part.
      assert.is(c, 'CONNECTION_LOST');
      assert.ok(took < 5000, `connection loss surfaced after ${took} ms`);
      // Later transfers fail fast and typed too (the engine drops the peer and cannot reach it).
      const again = await code(engine.write(victim.segment, local.addr, remote, 16, { timeoutMs: 2000 }));
      assert.not.equal(again, 'OK');
    } finally {
      await engine.close();
      await victim.close();
    }
  });
}

for (const provider of PROVIDERS) {
  test(`${provider}: a read timed out against a stalled peer is not reported settled while its RMA is posted`, async () => {
    const victim = await target(provider);
    const engine = await initiator(provider, { cancelGraceMs: 200 });
    const size = 64 * MiB;
    try {
      const remote = await victim.alloc(size, { fill: 0x33 });
      const bytes = new Uint8Array(size);
      const local = await engine.registerMemory(bytes);
      await engine.read(victim.segment, local.addr, remote, 4096);
      bytes.fill(0);
      await victim.stall();
      const started = Date.now();
      const err = (await engine.read(victim.segment, local.addr, remote, size, { timeoutMs: 300 }).then(
        () => undefined,
        (e) => e,
      )) as { code?: string; details?: { settled?: boolean } };
      assert.is(err?.code, 'TIMEOUT');
      assert.ok(Date.now() - started < 5000, `answered after ${Date.now() - started} ms`);
      const atAnswer = createHash('sha256').update(bytes).digest('hex');
      if (err.details?.settled !== false) {
        // Reported settled: then nothing may land afterwards, even when the peer wakes up.
        await victim.resume();
        await new Promise((r) => setTimeout(r, 1000));
        assert.is(createHash('sha256').update(bytes).digest('hex'), atAnswer, 'local memory changed after the batch was reported settled');
      } else {
        // Reported unsettled: the memory stays in use until the provider reports the reads.
        assert.is(
          await engine.unregisterMemory(local.addr).then(
            () => 'OK',
            (e) => e.code,
          ),
          'MEMORY_IN_USE',
        );
        await victim.resume();
        let c = 'MEMORY_IN_USE';
        for (let k = 0; k < 100 && c === 'MEMORY_IN_USE'; k++) {
          await new Promise((r) => setTimeout(r, 50));
          c = await engine.unregisterMemory(local.addr).then(
            () => 'OK',
            (e) => e.code,
          );
        }
        assert.is(c, 'OK', 'the transport settled the batch once the peer answered');
        const after = createHash('sha256').update(bytes).digest('hex');
        await new Promise((r) => setTimeout(r, 300));
        assert.is(createHash('sha256').update(bytes).digest('hex'), after, 'nothing landed after the transport settled');
        await engine.registerMemory(bytes);
      }
      // The engine keeps working with that peer.
      let again = 'none';
      for (let k = 0; k < 20 && again !== 'OK'; k++) {
        again = await code(engine.read(victim.segment, local.addr, remote, 4096, { timeoutMs: 2000 }));
        if (again !== 'OK') await new Promise((r) => setTimeout(r, 100));
      }
      assert.is(again, 'OK');
      assert.is(bytes[0], 0x33);
    } finally {
      await victim.resume();
      await engine.close();
      await victim.close();
    }
  });
}

for (const provider of PROVIDERS) {
  test(`${provider}: writes a stopped, then killed target never applied are not reported done`, async () => {
    // Most writes of a batch are posted without delivery completion and held until the
    // batch's last write (its fence) is delivered (write_fences.h). Their local completion
    // (the bytes left) must never count: when the fence fails, they fail with it.
    const victim = await target(provider);
    const engine = await initiator(provider);
    const n = 32;
    const size = n * 4096;
    try {
      const remote = await victim.alloc(size, { fill: 0 });
      const bytes = new Uint8Array(size);
      const local = await engine.registerMemory(bytes);
      await engine.write(victim.segment, local.addr, remote, 4096); // connection up
      bytes.set(randomBytes(size));
      const requests = Array.from({ length: n }, (_, k) => ({
        op: 'write' as const,
        local: local.addr + BigInt(k * 4096),
        remote: remote + BigInt(k * 4096),
        length: 4096,
      }));
      await victim.stall();
      let settledAt = 0;
      const done = engine
        .transfer(victim.segment, batchOf(requests), { timeoutMs: 20_000 })
        .then(
          (r) => ({ statuses: r.statuses, code: 'OK' }),
          (e: { code?: string; statuses?: Int32Array }) => ({ statuses: e.statuses, code: e.code }),
        )
        .finally(() => (settledAt = Date.now()));
      await new Promise((r) => setTimeout(r, 700));
      assert.is(settledAt, 0, 'the batch was reported done while the target was stopped');
      victim.kill();
      const outcome = await done;
      assert.is.not(outcome.code, 'OK');
      assert.ok(outcome.statuses, `no per-request statuses with ${outcome.code}`);
      const reportedDone = [...outcome.statuses!].filter((s) => s === 0).length;
      assert.is(reportedDone, 0, `${reportedDone} of ${n} writes reported done that the killed target never applied`);
    } finally {
      await engine.close();
      await victim.close().catch(() => {});
    }
  });
}

test('tcp;ofi_rxm: deliveryComplete: false is honoured (a write completes once its bytes left, even to a stopped target)', async () => {
  const victim = await target('tcp;ofi_rxm');
  const engine = await initiator('tcp;ofi_rxm', { deliveryComplete: false });
  try {
    const remote = await victim.alloc(64 * 1024, { fill: 0 });
    const bytes = new Uint8Array(64 * 1024).fill(7);
    const local = await engine.registerMemory(bytes);
    await engine.write(victim.segment, local.addr, remote, 4096);
    await victim.stall();
    // 16 KiB fits the loopback socket buffers: without delivery completion nothing waits for the target.
    const r = await engine.write(victim.segment, local.addr, remote, 16 * 1024, { timeoutMs: 3000 }).then(
      () => 'OK',
      (e) => e.code,
    );
    assert.is(r, 'OK');
    await victim.resume();
  } finally {
    await victim.resume();
    await engine.close();
    await victim.close();
  }
});

test('no usable provider or NIC → PROVIDER_UNAVAILABLE naming what was found and what to install', async () => {
  const create = (options: Record<string, unknown>) =>
    plugin.create(
      { segmentName: 'x', epoch: 5n, bindAddress: '127.0.0.1', connectTimeoutMs: 2000, env: {}, log: () => {} },
      parseOptions(plugin.options, options, {}, plugin.name),
    );
  const err = (await create({ provider: 'verbs' }).then(
    () => undefined,
    (e) => e,
  )) as { code: string; message: string };
  assert.is(err.code, 'PROVIDER_UNAVAILABLE');
  assert.match(err.message, /provider "verbs"/);
  assert.match(err.message, /RMA-capable providers found: .*tcp;ofi_rxm/);
  assert.match(err.message, /apt-get install/);
  const nic = (await create({ provider: 'sockets', nics: ['mlx5_0'] }).then(
    () => undefined,
    (e) => e,
  )) as { code: string; message: string };
  assert.is(nic.code, 'PROVIDER_UNAVAILABLE');
  assert.match(nic.message, /found no usable NIC: its domains are \[lo\], none of them in the NIC filter \[mlx5_0\]/);
  const shm = (await create({ provider: 'shm' }).then(
    () => undefined,
    (e) => e,
  )) as { code: string; message: string };
  assert.is(shm.code, 'PROVIDER_UNAVAILABLE');
  assert.match(shm.message, /checks neither memory keys nor bounds/);
  const probe = await plugin.probe!();
  assert.ok(probe.available, probe.reason);
  assert.ok(Array.isArray(probe.details?.providers));
});

test.run();
