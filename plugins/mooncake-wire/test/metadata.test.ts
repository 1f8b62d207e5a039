// Mooncake's metadata as te reads and writes it: the descriptor JSON (64-bit integers exact,
// strict all-or-nothing validation), the handshake framing, and the handshake server and
// client facing hostile peers.
import { createServer, type Server } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '@te/connector';
import {
  FrameReader,
  MSG_CONNECTION,
  MSG_LEGACY,
  MSG_METADATA,
  MSG_NOTIFY,
  MSG_PROBE,
  decodeFrame,
  encodeFrame,
  encodeSegment,
  handshake,
  mooncakeKeys,
  parseJson64,
  parseRpcMeta,
  parseSegment,
  rpcMetaValue,
  splitSegmentName,
  stringifyJson64,
} from '../src/index.js';
import { connect, closed, readN, wire } from './helpers.js';

const REAL =
  '{"buffers":[{"addr":140476778807296,"length":100663296,"name":"127.0.0.1:15265"}],"name":"127.0.0.1:15265","protocol":"tcp","tcp_data_port":15910,"tcp_proto_version":2,"timestamp":"2026-11-28 00:35:06.545338"}\n';

async function code(p: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    return isTransferError(e) ? e.code : `not a TransferError: ${String(e)}`;
  }
  return 'no error';
}

test('a real Mooncake descriptor parses; addresses above 2^53 stay exact; a missing tcp_proto_version means the legacy framing', () => {
  const s = parseSegment(REAL, '127.0.0.1:15265');
  assert.equal(s.buffers, [{ name: '127.0.0.1:15265', addr: 140476778807296n, length: 100663296n }]);
  assert.is(s.tcpDataPort, 15910);
  assert.is(s.tcpProtoVersion, 2);
  const big = REAL.replace('140476778807296', '18446744073709486080').replace('100663296', '65536');
  assert.is(parseSegment(big, 'x').buffers[0]!.addr, 18446744073709486080n);
  assert.is(parseSegment(REAL.replace(',"tcp_proto_version":2', ''), 'x').tcpProtoVersion, 1);
  assert.is(parseSegment(REAL.replace('"protocol":"tcp"', '"protocol":["rdma","tcp"]'), 'x').tcpDataPort, 15910, 'multi-protocol builds publish an array');
});

test('what te publishes reads back the same, keys sorted as jsoncpp writes them', () => {
  const text = encodeSegment({ name: '10.0.0.5:15432', tcpDataPort: 16001, buffers: [{ addr: 0x7f00_0000_1000n, length: 4096n }] });
  assert.ok(text.endsWith('}\n'));
  assert.ok(
    text.startsWith(
      '{"buffers":[{"addr":139637976731648,"length":4096,"name":"10.0.0.5:15432"}],"name":"10.0.0.5:15432","protocol":"tcp","tcp_data_port":16001,"tcp_proto_version":2,"timestamp":"',
    ),
  );
  const back = parseSegment(text, '10.0.0.5:15432');
  assert.equal(back.buffers, [{ name: '10.0.0.5:15432', addr: 0x7f00_0000_1000n, length: 4096n }]);
});

for (const [why, text, expected] of [
  ['not JSON', '{"buffers":', 'BAD_FRAME'],
  ['an array', '[]', 'BAD_FRAME'],
  ['no name', REAL.replace('"name":"127.0.0.1:15265","protocol"', '"protocol"'), 'BAD_FRAME'],
  ['an rdma-only segment', REAL.replace('"protocol":"tcp"', '"protocol":"rdma"'), 'NO_COMMON_TRANSPORT'],
  ['no data port', REAL.replace('"tcp_data_port":15910,', ''), 'BAD_FRAME'],
  ['a data port out of range', REAL.replace('15910', '70000'), 'BAD_FRAME'],
  ['a buffer at address 0', REAL.replace('140476778807296', '0'), 'BAD_FRAME'],
  ['an empty buffer', REAL.replace('100663296', '0'), 'BAD_FRAME'],
  ['a buffer without a name', REAL.replace('"name":"127.0.0.1:15265"}', '"name":""}'), 'BAD_FRAME'],
  ['a buffer running past 2^64', REAL.replace('140476778807296', '18446744073709551000'), 'BAD_FRAME'],
  ['an address as a string', REAL.replace('140476778807296', '"140476778807296"'), 'BAD_FRAME'],
  ['a fractional length', REAL.replace('100663296', '1.5'), 'BAD_FRAME'],
  ['overlapping buffers', REAL.replace('}],"name"', '},{"addr":140476778811392,"length":4096,"name":"x"}],"name"'), 'BAD_FRAME'],
  ['nesting 1000 deep', `${'['.repeat(1000)}${']'.repeat(1000)}`, 'BAD_FRAME'],
  ['trailing garbage', `${REAL}x`, 'BAD_FRAME'],
] as const) {
  test(`a descriptor with ${why} is refused whole (${expected})`, async () => {
    assert.is(await code(() => parseSegment(text, 'seg')), expected);
  });
}

test('JSON with 64-bit integers round-trips exactly', () => {
  const v = parseJson64('{"a":[18446744073709551615,-1,1.5,"x\\n\\u00e9",true,null],"b":{}}');
  // (objects come back without a prototype: a "__proto__" key is data, never a prototype)
  assert.equal((v as { a: unknown[] }).a, [18446744073709551615n, -1n, 1.5, 'x\né', true, null]);
  assert.is(Object.getPrototypeOf(parseJson64('{"__proto__":{"x":1}}')), null);
  assert.is(stringifyJson64(v), '{"a":[18446744073709551615,-1,1.5,"x\\né",true,null],"b":{}}');
});

test('handshake frames: typed and legacy, length limits, bytes after the frame', async () => {
  const f = encodeFrame(MSG_METADATA, '{}\n');
  assert.equal([...f.subarray(0, 9)], [4, 0, 0, 0, 0, 0, 0, 0, 1]);
  assert.equal(decodeFrame(f), { type: MSG_METADATA, json: '{}\n' });
  assert.equal(decodeFrame(encodeFrame(MSG_LEGACY, '{"a":1}')), { type: MSG_LEGACY, json: '{"a":1}' });
  const r = new FrameReader(64);
  assert.is(r.push(f.subarray(0, 5)), undefined);
  assert.equal(r.push(f.subarray(5)), { type: MSG_METADATA, json: '{}\n' });
  assert.is(await code(() => new FrameReader(64).push(Buffer.alloc(8))), 'BAD_FRAME', 'length 0');
  const long = Buffer.alloc(8);
  long.writeBigUInt64LE(65n);
  assert.is(await code(() => new FrameReader(64).push(long)), 'BAD_FRAME', 'longer than the limit');
  assert.is(await code(() => new FrameReader(64).push(Buffer.concat([f, Buffer.from([1])]))), 'BAD_FRAME', 'a second message');
});

test('segment names and the key layout of a shared store', () => {
  assert.equal(splitSegmentName('10.0.0.5:15432'), { host: '10.0.0.5', port: 15432 });
  assert.equal(splitSegmentName('[::1]:15432'), { host: '::1', port: 15432 });
  for (const bad of ['10.0.0.5', '10.0.0.5:0', 'h:99999', ':1', '::1:2']) assert.throws(() => splitSegmentName(bad), bad);
  assert.equal(mooncakeKeys('10.0.0.5:15432'), { descriptor: 'mooncake/ram/10.0.0.5:15432', rpcMeta: 'mooncake/rpc_meta/10.0.0.5:15432' });
  assert.equal(mooncakeKeys('10.0.0.5:15432', 'c1'), { descriptor: 'mooncake/c1/ram/10.0.0.5:15432', rpcMeta: 'mooncake/c1/rpc_meta/10.0.0.5:15432' });
  assert.is(mooncakeKeys('a/b').descriptor, 'mooncake/a/b');
  assert.is(rpcMetaValue('10.0.0.5', 15432), '{"ip_or_host_name":"10.0.0.5","rpc_port":15432}\n');
  assert.equal(parseRpcMeta(rpcMetaValue('10.0.0.5', 15432)), { host: '10.0.0.5', port: 15432 });
  assert.is(parseRpcMeta('{"ip_or_host_name":"h","rpc_port":0}'), undefined);
});

test('the handshake server answers Metadata, Probe, Notify, Connection and legacy frames as a Mooncake peer does', async () => {
  const t = await wire({ listen: true });
  const notes: string[] = [];
  t.onNotification((n) => notes.push(`${n.from}:${Buffer.from(n.payload).toString()}`));
  try {
    const { port } = splitSegmentName(t.mooncakeSegment!);
    const buf = new Uint8Array(4096);
    const reg = await t.registerMemory({ buffer: buf, length: 4096n, device: 'cpu', remoteAccess: true });
    await t.registerMemory({ buffer: new Uint8Array(4096), length: 4096n, device: 'cpu', remoteAccess: false });
    const d = parseSegment(await handshake('127.0.0.1', port, MSG_METADATA, '{}\n', 2000), t.mooncakeSegment!);
    assert.is(d.name, t.mooncakeSegment);
    assert.equal(
      d.buffers.map((b) => [b.addr, b.length]),
      [[reg.addr, 4096n]],
      'only remote-accessible memory is published',
    );
    assert.is(d.tcpDataPort, (t.endpoint() as { dataPort: number }).dataPort);
    assert.is(await handshake('127.0.0.1', port, MSG_PROBE, '{}\n', 2000), '{"status":"success"}\n');
    assert.is(await handshake('127.0.0.1', port, MSG_NOTIFY, '{"name":"peer:1","notify_msg":"done"}\n', 2000), '{"name":"","notify_msg":"success"}\n');
    assert.equal(notes, ['peer:1:done']);
    assert.is(
      await handshake('127.0.0.1', port, MSG_NOTIFY, '{"name":1}\n', 2000),
      '{"name":"","notify_msg":""}\n',
      'a malformed notify is refused, not delivered',
    );
    assert.ok(JSON.parse(await handshake('127.0.0.1', port, MSG_CONNECTION, '{}\n', 2000)).qp_num.length === 0);
    assert.ok(JSON.parse(await handshake('127.0.0.1', port, MSG_LEGACY, '{"local_nic_path":"x"}', 2000)).reply_msg === '');
    await t.unregisterMemory(reg.addr);
    assert.is(parseSegment(await handshake('127.0.0.1', port, MSG_METADATA, '{}\n', 2000), 'x').buffers.length, 0, 'unregistered memory leaves the descriptor');
  } finally {
    await t.close();
  }
});

test('the handshake server drops hostile frames and silent clients, and keeps serving', async () => {
  const t = await wire({ listen: true, handshakeTimeoutMs: 300 });
  try {
    const { port } = splitSegmentName(t.mooncakeSegment!);
    const huge = Buffer.alloc(8);
    huge.writeBigUInt64LE(1n << 40n);
    const notJson = encodeFrame(MSG_METADATA, '{not json');
    for (const bytes of [huge, Buffer.alloc(8), notJson, Buffer.concat([encodeFrame(MSG_PROBE, '{}'), encodeFrame(MSG_PROBE, '{}')])]) {
      const s = await connect(port);
      s.write(bytes);
      const got = await readN(s, 9, 1000);
      assert.ok(got.length === 0 || bytes.length > 40, 'no answer to a malformed frame');
      assert.ok(await closed(s));
    }
    const silent = await connect(port);
    assert.ok(await closed(silent, 2000), 'a silent client is dropped after handshakeTimeoutMs');
    assert.ok(t.stats().handshakesRefused >= 3);
    assert.is(await handshake('127.0.0.1', port, MSG_PROBE, '{}\n', 2000), '{"status":"success"}\n');
  } finally {
    await t.close();
  }
});

async function fakePeer(reply: (socket: import('node:net').Socket) => void): Promise<{ server: Server; port: number }> {
  const server = createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', () => reply(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as { port: number }).port };
}

test('the handshake listener holds at most maxHandshakeConnections at once', async () => {
  const t = await wire({ listen: true, maxHandshakeConnections: 2, handshakeTimeoutMs: 5000 });
  try {
    const { port } = splitSegmentName(t.mooncakeSegment!);
    const a = await connect(port);
    const b = await connect(port);
    await new Promise((r) => setTimeout(r, 100));
    const c = await connect(port);
    assert.ok(await closed(c, 2000), 'the third is closed at once');
    assert.ok(!a.destroyed && !b.destroyed);
    a.destroy();
    b.destroy();
  } finally {
    await t.close();
  }
});

test('the handshake client: garbage, a reply of another type, a half reply, silence and no listener are typed errors', async () => {
  const cases: [string, (s: import('node:net').Socket) => void, string][] = [
    ['garbage', (s) => s.end(Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n')), 'BAD_FRAME'],
    ['another type', (s) => s.end(encodeFrame(MSG_PROBE, '{"status":"success"}\n')), 'BAD_FRAME'],
    ['a half reply', (s) => s.end(encodeFrame(MSG_METADATA, REAL).subarray(0, 40)), 'CONNECTION_LOST'],
    ['silence', () => undefined, 'TIMEOUT'],
  ];
  for (const [name, reply, expected] of cases) {
    const { server, port } = await fakePeer(reply);
    try {
      assert.is(await code(handshake('127.0.0.1', port, MSG_METADATA, '{}\n', 300)), expected, name);
    } finally {
      server.close();
    }
  }
  const { server, port } = await fakePeer(() => undefined);
  await new Promise((r) => server.close(r)); // the port no longer listens
  assert.is(await code(handshake('127.0.0.1', port, MSG_METADATA, '{}\n', 1000)), 'PEER_UNREACHABLE');
});

test('openSegment of a peer whose descriptor is malformed fails typed, and opens nothing', async () => {
  const { server, port } = await fakePeer((s) => s.end(encodeFrame(MSG_METADATA, REAL.replace('140476778807296', '0'))));
  const t = await wire({});
  try {
    assert.is(await code(t.openSegment(`127.0.0.1:${port}`)), 'BAD_FRAME');
    assert.is(await code(t.openSegment('not-a-segment')), 'INVALID_ARGUMENT');
  } finally {
    await t.close();
    server.close();
  }
});

test.run();
