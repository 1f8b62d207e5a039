// te as a Mooncake target, driven by a hand-written Mooncake client over real sockets: every
// frame type of the data path in both framings, and the hostile cases.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { until } from '@te/testkit';
import { STATUS_OK, STATUS_REJECTED, closed, connect, guarded, header, readN, wire } from './helpers.js';

test('v2 WRITE lands exactly in the addressed range and is acknowledged after the bytes are in memory', async () => {
  const t = await wire({ listen: true });
  try {
    const { all, region, addr } = await guarded(t, 65536);
    const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
    const body = Buffer.alloc(4096, 0xcc);
    s.write(Buffer.concat([header(4096n, addr + 1000n, 0x81, 0xab), body]));
    assert.equal(await readN(s, 8), STATUS_OK);
    assert.ok(region.subarray(1000, 5096).every((b) => b === 0xcc));
    const touched = all.reduce((n, b) => n + (b === 0xcc ? 1 : 0), 0);
    assert.is(touched, 4096, 'nothing outside the addressed range changed');
    // the same connection serves the next request (pooled initiators keep it)
    s.write(Buffer.concat([header(8n, addr, 0x81), Buffer.alloc(8, 0x11)]));
    assert.equal(await readN(s, 8), STATUS_OK);
    assert.ok(region.subarray(0, 8).every((b) => b === 0x11));
    s.destroy();
    assert.is(t.stats().writes, 2);
  } finally {
    await t.close();
  }
});

test('v1 WRITE is applied without any reply, and the next header on the connection is served', async () => {
  const t = await wire({ listen: true });
  try {
    const { region, addr } = await guarded(t, 8192);
    const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
    s.write(Buffer.concat([header(100n, addr, 0x01), Buffer.alloc(100, 0x5a), header(16n, addr + 200n, 0x00)]));
    const back = await readN(s, 16);
    assert.is(back.length, 16, 'the v1 READ after a v1 WRITE streams its bytes with no status frame');
    assert.ok(back.every((b) => b === 0));
    assert.ok(region.subarray(0, 100).every((b) => b === 0x5a));
    assert.is(region[100], 0);
    s.destroy();
  } finally {
    await t.close();
  }
});

test('v2 READ answers a status frame, then exactly the requested bytes; v1 READ only the bytes', async () => {
  const t = await wire({ listen: true });
  try {
    const { region, addr } = await guarded(t, 8192);
    for (let i = 0; i < region.length; i++) region[i] = i & 0xff;
    const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
    s.write(header(300n, addr + 7n, 0x80));
    const got = await readN(s, 308);
    assert.equal(got.subarray(0, 8), STATUS_OK);
    assert.equal(new Uint8Array(got.subarray(8)), region.subarray(7, 307));
    s.write(header(5n, addr + 8000n, 0x00));
    assert.equal(new Uint8Array(await readN(s, 5)), region.subarray(8000, 8005));
    // an opcode other than WRITE is served as READ, as Mooncake does
    s.write(header(2n, addr, 0x80 | 0x7e));
    assert.equal(new Uint8Array((await readN(s, 10)).subarray(8)), region.subarray(0, 2));
    s.destroy();
    assert.is(t.stats().reads, 3);
  } finally {
    await t.close();
  }
});

for (const [name, size, offset] of [
  ['past the end of the region', 4096n, 8192n - 100n],
  ['before the region', 16n, -16n],
  ['of size 0', 0n, 0n],
  ['wrapping around 2^64', 0xffff_ffff_ffff_ff00n, 16n],
] as const) {
  test(`v2 WRITE ${name}: rejection frame, connection closed, nothing written`, async () => {
    const t = await wire({ listen: true });
    try {
      const { all, addr } = await guarded(t, 8192);
      const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
      s.write(Buffer.concat([header(size, addr + offset, 0x81), Buffer.alloc(Math.min(Number(size & 0xffffn), 4096), 0xcc)]));
      assert.equal(await readN(s, 8), STATUS_REJECTED);
      assert.ok(await closed(s), 'the target closed the connection');
      assert.ok(
        all.every((b) => b === 0),
        'no byte changed',
      );
      assert.is(t.stats().rejected, 1);
    } finally {
      await t.close();
    }
  });
}

test('v1 out-of-range READ and WRITE: the connection is closed without a byte (the legacy framing has no error reply)', async () => {
  const t = await wire({ listen: true });
  try {
    const { all, addr } = await guarded(t, 4096);
    for (const op of [0x00, 0x01]) {
      const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
      s.write(Buffer.concat([header(64n, addr + 4090n, op), Buffer.alloc(64, 0xcc)]));
      const got = await readN(s, 8, 1000);
      assert.is(got.length, 0);
      assert.ok(await closed(s));
    }
    assert.ok(all.every((b) => b === 0));
    assert.is(t.stats().rejected, 2);
  } finally {
    await t.close();
  }
});

test('unregistered memory and local-only memory are out of reach', async () => {
  const t = await wire({ listen: true });
  try {
    const local = new Uint8Array(4096);
    const reg = await t.registerMemory({ buffer: local, length: 4096n, device: 'cpu', remoteAccess: false });
    const { addr } = await guarded(t, 4096);
    await t.unregisterMemory(addr);
    for (const target of [reg.addr, addr]) {
      const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
      s.write(Buffer.concat([header(16n, target, 0x81), Buffer.alloc(16, 0xcc)]));
      assert.equal(await readN(s, 8), STATUS_REJECTED);
      s.destroy();
    }
    assert.ok(local.every((b) => b === 0));
  } finally {
    await t.close();
  }
});

test('a truncated WRITE body (peer disappears mid-request): no acknowledgement, nothing outside the range, the target carries on', async () => {
  const t = await wire({ listen: true });
  try {
    const { all, region, addr } = await guarded(t, 65536);
    const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
    s.write(Buffer.concat([header(65536n, addr, 0x81), Buffer.alloc(1000, 0xcc)]));
    await until('the 1000 bytes sent of the WRITE landed', () => region[999] === 0xcc, 3000);
    s.destroy();
    await until('the WRITE counted as truncated', () => t.stats().truncated === 1, 3000);
    assert.ok(all.subarray(0, 4096).every((b) => b === 0) && all.subarray(4096 + 65536).every((b) => b === 0));
    // still serving
    const s2 = await connect((t.endpoint() as { dataPort: number }).dataPort);
    s2.write(Buffer.concat([header(4n, addr, 0x81), Buffer.alloc(4, 0x77)]));
    assert.equal(await readN(s2, 8), STATUS_OK);
    s2.destroy();
  } finally {
    await t.close();
  }
});

// A Mooncake initiator without connection pooling opens a connection per request and, in
// the legacy framing, the next one as soon as a WRITE is in its socket: when te is slower,
// hundreds of connections from one address are ordinary. Refusing those over the per-address
// bound failed the initiator's transfers (interop-target.test.ts, under CPU load: 208 of 720
// refused); they now wait, and only connections past maxWaitingConnections are refused.
test('bounded: a connection over maxConnectionsPerAddress waits unread and is served when a place frees; past maxWaitingConnections one is closed; idle ones close after idleTimeoutMs', async () => {
  const t = await wire({ listen: true, maxConnectionsPerAddress: 2, maxWaitingConnections: 1, idleTimeoutMs: 300 });
  try {
    const { region, addr } = await guarded(t, 4096);
    const port = (t.endpoint() as { dataPort: number }).dataPort;
    const a = await connect(port);
    const b = await connect(port);
    await until('both connections accepted', () => t.stats().connectionsAccepted === 2, 3000);
    const c = await connect(port);
    await until('the third connection waits', () => t.stats().connectionsWaited === 1, 3000);
    c.write(Buffer.concat([header(8n, addr, 0x81), Buffer.alloc(8, 0x42)]));
    const d = await connect(port);
    assert.ok(await closed(d, 2000), 'the fourth connection is refused: the one waiting place is taken');
    assert.is(t.stats().connectionsRefused, 1);
    assert.is(region[0], 0, 'a waiting connection is not read');
    assert.is(t.stats().connectionsOpen, 3);
    a.destroy();
    assert.equal(await readN(c, 8), STATUS_OK, 'served once the first connection closed');
    assert.ok(region.subarray(0, 8).every((x) => x === 0x42));
    assert.is(t.stats().connectionsAccepted, 3);
    assert.ok(await closed(b, 3000), 'idle connection closed');
    assert.ok(await closed(c, 3000));
    assert.ok(t.stats().timeouts! >= 2);
  } finally {
    await t.close();
  }
});

test('a request stalled mid-body longer than ioTimeoutMs loses its connection', async () => {
  const t = await wire({ listen: true, ioTimeoutMs: 200 });
  try {
    const { addr } = await guarded(t, 4096);
    const s = await connect((t.endpoint() as { dataPort: number }).dataPort);
    s.write(Buffer.concat([header(4096n, addr, 0x81), Buffer.alloc(10, 1)]));
    assert.ok(await closed(s, 3000));
  } finally {
    await t.close();
  }
});

test('off by default: no listener unless `listen`, and it says so; on: a warning names the exposed ports', async () => {
  const { logs } = await import('./helpers.js');
  logs.length = 0;
  const off = await wire({});
  assert.is(off.mooncakeSegment, undefined);
  assert.equal(off.endpoint(), { mooncakeSegment: null });
  await off.close();
  assert.ok(logs.some((l) => l.startsWith('info') && l.includes('listener off')));
  const on = await wire({ listen: true });
  assert.ok(logs.some((l) => l.startsWith('warn') && l.includes('no authentication') && l.includes(on.mooncakeSegment!)));
  await on.close();
});

test.run();
