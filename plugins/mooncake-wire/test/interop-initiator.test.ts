// te as the initiator toward the real Mooncake target (transfer_engine_bench, its own process):
// the segment is opened by name over Mooncake's P2P handshake, a pattern is written and read
// back byte-exact in both framings, pooled and per request; out-of-range requests are refused
// locally, and a descriptor that lies about its buffers meets the target's rejection.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PluginRegistry, batchOf, createTransferEngine, isTransferError, type SegmentDescriptor, type TransportPeer } from '@te/connector';
import wirePlugin from '../src/index.js';
import { HandshakeServer, MSG_METADATA, handshake } from '../src/index.js';
import { wire } from './helpers.js';
import { startTarget, unavailable, type MooncakeTarget } from './mooncake-bin.js';

const why = unavailable();
const BLOCK = 65536;
const N = 16;

function pattern(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}

const modes = [
  { name: 'v2 framing, pooled', options: { framing: 'auto', connectionPool: true } },
  { name: 'v2 framing, one connection per request', options: { framing: 'auto', connectionPool: false } },
  { name: 'legacy framing, pooled', options: { framing: 'legacy', connectionPool: true } },
  { name: 'legacy framing, one connection per request', options: { framing: 'legacy', connectionPool: false } },
] as const;

if (why) {
  console.log(`  skipped Mooncake interop (te as initiator): ${why}`);
  for (const m of modes) test.skip(`te writes into and reads back from a Mooncake target (${m.name}) — skipped: ${why}`, () => undefined);
  test.skip(`the engine API against a Mooncake target — skipped: ${why}`, () => undefined);
  test.skip(`te's out-of-range requests to a Mooncake target — skipped: ${why}`, () => undefined);
} else {
  let target: MooncakeTarget;
  test.before(async () => {
    target = await startTarget(16 << 20);
  });
  test.after(async () => {
    await target?.stop();
  });

  for (const m of modes) {
    test(`te writes into and reads back from a Mooncake target (${m.name})`, async () => {
      const t = await wire({ ...m.options, lanesPerPeer: 4 });
      try {
        const { descriptor, peer } = await t.openSegment(target.segment);
        assert.is(descriptor.buffers.length, 1);
        const base = descriptor.buffers[0]!.addr;
        const seed = Math.floor(Math.random() * 255);
        const src = pattern(BLOCK * N, seed);
        const dst = new Uint8Array(BLOCK * N + 2 * 4096).fill(0xee);
        const s = await t.registerMemory({ buffer: src, length: BigInt(src.length), device: 'cpu', remoteAccess: false });
        const d = await t.registerMemory({ buffer: dst.subarray(4096, 4096 + BLOCK * N), length: BigInt(BLOCK * N), device: 'cpu', remoteAccess: false });
        // Scattered: request i goes to block (N-1-i) of a window 1 MiB into the target's buffer.
        const remote = (i: number) => base + (1n << 20n) + BigInt((N - 1 - i) * BLOCK);
        const writes = batchOf(
          Array.from({ length: N }, (_, i) => ({ op: 'write' as const, local: s.addr + BigInt(i * BLOCK), remote: remote(i), length: BLOCK })),
        );
        const w = await t.submit(peer, writes, { timeoutMs: 10000 });
        assert.ok(w.statuses.every((x) => x === 0));
        assert.is(w.bytes, BigInt(BLOCK * N));
        const reads = batchOf(
          Array.from({ length: N }, (_, i) => ({ op: 'read' as const, local: d.addr + BigInt(i * BLOCK), remote: remote(i), length: BLOCK })),
        );
        const r = await t.submit(peer, reads, { timeoutMs: 10000 });
        assert.ok(r.statuses.every((x) => x === 0));
        assert.equal(dst.subarray(4096, 4096 + BLOCK * N), src, 'read back byte-exact');
        assert.ok(
          dst.subarray(0, 4096).every((b) => b === 0xee) && dst.subarray(4096 + BLOCK * N).every((b) => b === 0xee),
          'nothing landed outside the local range',
        );
        // A notification after the data: the Mooncake target must accept it (an empty
        // notify_msg in its reply would fail the batch).
        const n = await t.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: remote(0), length: BLOCK }]), {
          timeoutMs: 10000,
          notify: new TextEncoder().encode(`layer ${seed} done`),
        });
        assert.ok(n.statuses.every((x) => x === 0));
        const opened = t.stats().connectionsOpened - (m.options.connectionPool ? 0 : 1);
        if (m.options.connectionPool) assert.ok(opened <= 4, `pooled: ${opened} connections`);
        else assert.is(opened, 2 * N, 'one connection per request');
        await t.closePeer(peer);
      } finally {
        await t.close();
      }
    });
  }

  test("the engine API against a Mooncake target: openSegment('host:port'), write, read, an out-of-range TransferError", async () => {
    const r = new PluginRegistry();
    r.register('mooncake-wire', wirePlugin);
    const engine = await createTransferEngine({ connector: 'mooncake-tcp', transports: ['mooncake-wire'], logLevel: 'error' }, { registry: r });
    try {
      const d = await engine.openSegment(target.segment);
      const base = d.buffers[0]!.addr;
      const mine = pattern(2 * BLOCK, 77);
      const h = await engine.registerMemory(mine);
      await engine.transfer(target.segment, batchOf([{ op: 'write', local: h.addr, remote: base + 12345n, length: BLOCK }]));
      await engine.read(target.segment, h.addr + BigInt(BLOCK), base + 12345n, BLOCK);
      assert.equal(mine.subarray(BLOCK), mine.subarray(0, BLOCK));
      const err = await engine.write(target.segment, h.addr, base + d.buffers[0]!.length - 10n, 100).catch((x: unknown) => x);
      assert.ok(isTransferError(err) && err.code === 'ADDRESS_OUT_OF_RANGE', String(err));
    } finally {
      await engine.close();
    }
  });

  test("te's out-of-range requests to a Mooncake target: refused before sending; past a lying descriptor, rejected by the target", async () => {
    const t = await wire({});
    const liar = await HandshakeServer.listen(
      { host: '127.0.0.1', port: 0, maxConnections: 8, timeoutMs: 2000 },
      {
        // The real descriptor with its buffer claimed 64 MiB longer than it is.
        metadata: () => lie,
        notify: () => false,
      },
    );
    let lie = '';
    try {
      const real = await handshake('127.0.0.1', Number(target.segment.split(':')[1]), MSG_METADATA, '{}\n', 3000);
      lie = real.replace(/"length":(\d+)/, (_, n: string) => `"length":${BigInt(n) + (64n << 20n)}`);
      const src = new Uint8Array(4096).fill(0x42);
      const s = await t.registerMemory({ buffer: src, length: 4096n, device: 'cpu', remoteAccess: false });
      const { descriptor, peer } = await t.openSegment(target.segment);
      const end = descriptor.buffers[0]!.addr + descriptor.buffers[0]!.length;
      const local = await t.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: end - 100n, length: 4096 }]), { timeoutMs: 5000 });
      assert.is(local.statuses[0], -2, 'ADDRESS_OUT_OF_RANGE without sending');
      assert.is(t.stats().connectionsOpened, 0);

      // The liar's descriptor names the real target's data port: the target itself must refuse.
      const lied: SegmentDescriptor = await t.fetchSegment(`127.0.0.1:${liar.port}`);
      const liedPeer: TransportPeer = await t.openPeer(lied);
      const v2 = await t.submit(liedPeer, batchOf([{ op: 'write', local: s.addr, remote: end + 4096n, length: 4096 }]), { timeoutMs: 5000 });
      assert.is(v2.statuses[0], -2, "the target's rejection frame becomes ADDRESS_OUT_OF_RANGE");
      await t.close();

      const legacy = await wire({ framing: 'legacy' });
      try {
        const s2 = await legacy.registerMemory({ buffer: src, length: 4096n, device: 'cpu', remoteAccess: false });
        const p = await legacy.openPeer(await legacy.fetchSegment(`127.0.0.1:${liar.port}`));
        const err = await legacy
          .submit(p, batchOf([{ op: 'read', local: s2.addr, remote: end + 4096n, length: 4096 }]), { timeoutMs: 5000 })
          .catch((e: unknown) => e);
        assert.ok(isTransferError(err) && err.code === 'CONNECTION_LOST', `legacy framing: the target can only close the connection (${String(err)})`);
        assert.ok(src.every((b) => b === 0x42));
      } finally {
        await legacy.close();
      }
    } finally {
      await t.close();
      await liar.close();
    }
  });
}

test.run();
