// te as a Mooncake initiator, against te's own Mooncake-compatible target and against fake
// targets that misbehave: framings, connection modes, deadlines, aborts, a peer that
// disappears, a desynchronised stream. Every batch settles with a typed error.
import { createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, isTransferError, type TransferError } from '@te/connector';
import { until } from '@te/testkit';
import { HandshakeServer, encodeSegment, type MooncakeWireTransport } from '../src/index.js';
import { guarded, wire } from './helpers.js';

function pattern(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + seed) & 0xff;
  return b;
}

for (const framing of ['auto', 'legacy'] as const) {
  for (const connectionPool of [true, false]) {
    test(`te to te over the Mooncake wire (${framing === 'auto' ? 'v2' : 'legacy'} framing, ${connectionPool ? 'pooled' : 'one connection per request'}): byte-exact both ways`, async () => {
      const target = await wire({ listen: true });
      const init = await wire({ framing, connectionPool, lanesPerPeer: 3 });
      try {
        const { all, region } = await guarded(target, 1 << 20, 4096, 0x11);
        const src = pattern(1 << 20, 3);
        const dst = new Uint8Array(1 << 20);
        const s = await init.registerMemory({ buffer: src, length: BigInt(src.length), device: 'cpu', remoteAccess: false });
        const d = await init.registerMemory({ buffer: dst, length: BigInt(dst.length), device: 'cpu', remoteAccess: false });
        const { descriptor, peer } = await init.openSegment(target.mooncakeSegment!);
        const base = descriptor.buffers[0]!.addr;
        const n = 64;
        const size = (1 << 20) / n;
        const w = await init.submit(
          peer,
          batchOf(
            Array.from({ length: n }, (_, i) => ({ op: 'write' as const, local: s.addr + BigInt(i * size), remote: base + BigInt(i * size), length: size })),
          ),
          { timeoutMs: 10000 },
        );
        assert.is(w.bytes, BigInt(1 << 20));
        assert.equal(region, src);
        assert.ok(all.subarray(0, 4096).every((b) => b === 0x11) && all.subarray(4096 + (1 << 20)).every((b) => b === 0x11));
        await init.submit(
          peer,
          batchOf(
            Array.from({ length: n }, (_, i) => ({ op: 'read' as const, local: d.addr + BigInt(i * size), remote: base + BigInt(i * size), length: size })),
          ),
          { timeoutMs: 10000 },
        );
        assert.equal(dst, src);
        const st = target.stats();
        // legacy: every WRITE is followed by a 1-byte READ on its connection, the fence that
        // tells when its body was applied
        assert.is(framing === 'auto' ? st.v2Requests : st.v1Requests, framing === 'auto' ? 2 * n : 3 * n);
        assert.is(st.writes, n);
        if (connectionPool) assert.ok(init.stats().connectionsOpened <= 3);
        else assert.is(init.stats().connectionsOpened, 2 * n);
        // zero-length requests complete without traffic
        const z = await init.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: base, length: 0 }]), { timeoutMs: 1000 });
        assert.is(z.statuses[0], 0);
      } finally {
        await init.close();
        await target.close();
      }
    });
  }
}

test("a Mooncake segment's stand-in epoch: the same for the same life and buffers, new when they change", async () => {
  const target = await wire({ listen: true });
  const init = await wire({});
  try {
    await guarded(target, 4096);
    const a = await init.fetchSegment(target.mooncakeSegment!);
    const b = await init.fetchSegment(target.mooncakeSegment!);
    assert.is(a.epoch, b.epoch);
    await guarded(target, 4096);
    assert.is.not((await init.fetchSegment(target.mooncakeSegment!)).epoch, a.epoch);
  } finally {
    await init.close();
    await target.close();
  }
});

test('a kept connection the target closed while idle is replaced, not used: the next batch succeeds', async () => {
  const target = await wire({ listen: true, idleTimeoutMs: 200 });
  const init = await wire({ lanesPerPeer: 1 });
  try {
    const { addr } = await guarded(target, 4096);
    const src = new Uint8Array(64).fill(9);
    const s = await init.registerMemory({ buffer: src, length: 64n, device: 'cpu', remoteAccess: false });
    const { peer } = await init.openSegment(target.mooncakeSegment!);
    for (const framing of ['first', 'after the idle close']) {
      const r = await init.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: addr, length: 64 }]), { timeoutMs: 3000 });
      assert.is(r.statuses[0], 0, framing);
      await until(`the target closed the connection (${framing})`, () => target.stats().connectionsOpen === 0, 3000);
    }
    assert.is(init.stats().connectionsOpened, 2);
  } finally {
    await init.close();
    await target.close();
  }
});

test('te peers are never reached over the unauthenticated wire: te descriptors are refused and not reachable', async () => {
  const t = await wire({});
  try {
    const teDescriptor = {
      version: 1,
      name: '127.0.0.1:5000',
      epoch: 5n,
      hostname: 'h',
      pid: 1,
      transports: {
        'mooncake-wire': { class: 'tcp' as const, memoryKinds: ['cpu' as const], endpoint: { mooncakeSegment: '127.0.0.1:5001', dataPort: 5002 } },
      },
      buffers: [],
    };
    assert.is(t.reaches(teDescriptor), false);
    const e = await t.openPeer(teDescriptor).catch((x: unknown) => x);
    assert.ok(isTransferError(e) && e.code === 'NO_COMMON_TRANSPORT');
  } finally {
    await t.close();
  }
});

/** A fake Mooncake target: a real handshake server publishing one buffer, and a data port run by `serve`. */
async function fakeTarget(serve: (s: Socket) => void, version = 2): Promise<{ segment: string; close(): Promise<void>; data: Server }> {
  const data = createServer((s) => {
    s.on('error', () => undefined);
    serve(s);
  });
  await new Promise<void>((r) => data.listen(0, '127.0.0.1', r));
  const dataPort = (data.address() as { port: number }).port;
  let name = '';
  const hs = await HandshakeServer.listen(
    { host: '127.0.0.1', port: 0, maxConnections: 8, timeoutMs: 2000 },
    {
      metadata: () =>
        encodeSegment({ name, tcpDataPort: dataPort, buffers: [{ addr: 0x10000n, length: 1n << 24n }] }).replace(
          '"tcp_proto_version":2',
          `"tcp_proto_version":${version}`,
        ),
      notify: () => true,
    },
  );
  name = `127.0.0.1:${hs.port}`;
  return {
    segment: name,
    data,
    close: async () => {
      await hs.close();
      data.close();
    },
  };
}

async function failure(init: MooncakeWireTransport, segment: string, op: 'read' | 'write', timeoutMs = 3000, signal?: AbortSignal): Promise<TransferError> {
  const buf = new Uint8Array(1 << 20);
  const reg = await init.registerMemory({ buffer: buf, length: BigInt(buf.length), device: 'cpu', remoteAccess: false });
  const { peer } = await init.openSegment(segment);
  const e = await init
    .submit(peer, batchOf([{ op, local: reg.addr, remote: 0x10000n, length: buf.length }]), { timeoutMs, ...(signal ? { signal } : {}) })
    .then(
      () => undefined,
      (x: unknown) => x,
    );
  await init.unregisterMemory(reg.addr);
  assert.ok(isTransferError(e), `a TransferError, got ${String(e)}`);
  return e as TransferError;
}

test('a target that never acknowledges: TIMEOUT at the deadline, and the write may have landed (remoteMayBeWritten)', async () => {
  const f = await fakeTarget((s) => s.resume());
  const init = await wire({});
  try {
    const started = Date.now();
    const e = await failure(init, f.segment, 'write', 400);
    assert.is(e.code, 'TIMEOUT');
    assert.ok(Date.now() - started < 2500, 'settled near the deadline');
    assert.is((e.details as { remoteMayBeWritten?: boolean }).remoteMayBeWritten, true);
  } finally {
    await init.close();
    await f.close();
  }
});

test('an aborted batch settles ABORTED', async () => {
  const f = await fakeTarget((s) => s.resume());
  const init = await wire({ lanesPerPeer: 1 });
  try {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const started = Date.now();
    const e = await failure(init, f.segment, 'read', 5000, ac.signal);
    assert.is(e.code, 'ABORTED');
    assert.ok(Date.now() - started < 2000);
  } finally {
    await init.close();
    await f.close();
  }
});

test('a target that disappears in the middle of a READ: CONNECTION_LOST; the bytes it sent stay inside the local range', async () => {
  const f = await fakeTarget((s) => {
    s.once('data', () => {
      const ok = Buffer.from('0000000056544d4d', 'hex');
      ok.writeBigUInt64LE(0x4d43545600000000n);
      s.end(Buffer.concat([ok, Buffer.alloc(1000, 0x99)]));
    });
  });
  const init = await wire({});
  try {
    assert.is((await failure(init, f.segment, 'read')).code, 'CONNECTION_LOST');
  } finally {
    await init.close();
    await f.close();
  }
});

test('a status frame without the MCTV magic is BAD_FRAME (a desynchronised stream)', async () => {
  const f = await fakeTarget((s) => {
    s.once('data', () => s.write(Buffer.alloc(8, 0x41)));
  });
  const init = await wire({});
  try {
    assert.is((await failure(init, f.segment, 'read')).code, 'BAD_FRAME');
  } finally {
    await init.close();
    await f.close();
  }
});

test('a data port nobody listens on: PEER_UNREACHABLE', async () => {
  const f = await fakeTarget(() => undefined);
  await new Promise<void>((r) => f.data.close(() => r()));
  const init = await wire({});
  try {
    assert.is((await failure(init, f.segment, 'write')).code, 'PEER_UNREACHABLE');
  } finally {
    await init.close();
    await f.close();
  }
});

test('unregistered local memory and a full queue are refused before anything is sent', async () => {
  const f = await fakeTarget(() => undefined);
  const init = await wire({ maxQueued: 4 });
  try {
    const { peer } = await init.openSegment(f.segment);
    const r = await init.submit(peer, batchOf([{ op: 'write', local: 0x5000n, remote: 0x10000n, length: 16 }]), { timeoutMs: 1000 });
    assert.is(r.statuses[0], -3, 'MEMORY_NOT_REGISTERED');
    const buf = new Uint8Array(4096);
    const reg = await init.registerMemory({ buffer: buf, length: 4096n, device: 'cpu', remoteAccess: false });
    const e = await init
      .submit(peer, batchOf(Array.from({ length: 5 }, () => ({ op: 'write' as const, local: reg.addr, remote: 0x10000n, length: 16 }))), { timeoutMs: 1000 })
      .catch((x: unknown) => x);
    assert.ok(isTransferError(e) && e.code === 'POOL_EXHAUSTED');
    assert.is(init.stats().connectionsOpened, 0);
  } finally {
    await init.close();
    await f.close();
  }
});

test('closing the transport with a batch in flight settles it ABORTED', async () => {
  const f = await fakeTarget((s) => s.resume());
  const init = await wire({});
  try {
    const buf = new Uint8Array(4096);
    const reg = await init.registerMemory({ buffer: buf, length: 4096n, device: 'cpu', remoteAccess: false });
    const { peer } = await init.openSegment(f.segment);
    const p = init.submit(peer, batchOf([{ op: 'read', local: reg.addr, remote: 0x10000n, length: 4096 }]), { timeoutMs: 10000 }).catch((x: unknown) => x);
    await until('the initiator connected to the silent target', () => f.data.listening && init.stats().connectionsOpened === 1, 3000);
    await init.close();
    const e = await p;
    assert.ok(isTransferError(e) && e.code === 'ABORTED', String(e));
  } finally {
    await init.close();
    await f.close();
  }
});

test('a notification travels to the target over its handshake port after the data landed', async () => {
  const target = await wire({ listen: true });
  const init = await wire({});
  try {
    const got: string[] = [];
    target.onNotification((n) => got.push(Buffer.from(n.payload).toString()));
    const { addr } = await guarded(target, 4096);
    const src = new Uint8Array(16).fill(7);
    const s = await init.registerMemory({ buffer: src, length: 16n, device: 'cpu', remoteAccess: false });
    const { peer } = await init.openSegment(target.mooncakeSegment!);
    await init.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: addr, length: 16 }]), {
      timeoutMs: 3000,
      notify: new TextEncoder().encode('layer 3 done'),
    });
    assert.equal(got, ['layer 3 done']);
  } finally {
    await init.close();
    await target.close();
  }
});

test.run();
