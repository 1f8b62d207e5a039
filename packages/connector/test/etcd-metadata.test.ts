// Segment descriptors in a real etcd (Debian's etcd-server on loopback): the metadata
// setting, engines over mooncake-tcp in two processes finding each other through etcd, an
// etcd that is not there at start, a killed process's descriptor leaving with its lease,
// and the records API refusing bad input. Outages and restarts: etcd-outage.test.ts.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { createTransferEngine, isTransferError, loadConfig, validateConfig } from '../src/index.js';
import { PEER_TTL_S, etcdCases, codeOf, expectedSum, freePort, readFrom, until, writeTo } from './fixtures/etcd-harness.js';

test("the metadata setting: connection strings, the object form, Mooncake's spelling, the environment", () => {
  const c = loadConfig({ env: {}, json: { connector: 'mooncake-tcp', metadata_server: 'etcd://10.0.0.5:2379,10.0.0.6' } });
  assert.equal([c.metadata.type, c.metadata.endpoints, c.metadata.prefix, c.metadata.leaseTtlS], ['etcd', ['10.0.0.5:2379', '10.0.0.6:2379'], 'te', 10]);
  assert.is(loadConfig({ env: { TE_CONNECTOR: 'mooncake-tcp', MC_METADATA_SERVER: 'P2PHANDSHAKE' } }).metadata.type, 'p2p');
  assert.is(loadConfig({ env: { TE_CONNECTOR: 'mooncake-tcp' } }).metadata.type, 'p2p', 'p2p stays the default');
  const e = loadConfig({
    env: {
      TE_CONNECTOR: 'mooncake-tcp',
      TE_METADATA: 'etcd://h:2379',
      MC_METADATA_SERVER: 'P2PHANDSHAKE',
      TE_METADATA_PREFIX: 'cluster-a',
      TE_HANDSHAKE_PORT: '17000',
    },
  }).metadata;
  assert.equal([e.type, e.endpoints, e.prefix, e.port], ['etcd', ['h:2379'], 'cluster-a', 17000], 'TE_METADATA wins over MC_METADATA_SERVER');
  const o = validateConfig({ connector: 'mooncake-tcp', metadata: { type: 'etcd', endpoints: ['[::1]:2379'], prefix: 'a/b', leaseTtlS: 5 } }).metadata;
  assert.equal([o.endpoints, o.prefix, o.leaseTtlS], [['[::1]:2379'], 'a/b', 5]);
  const refused: [unknown, string][] = [
    ['etcd://', 'metadata'],
    ['etcd://h:99999', 'h:99999'],
    ['zookeeper://h:2181', 'zookeeper'],
    ['etcd://a b:1', 'a b:1'],
    [{ type: 'etcd' }, 'no `metadata.endpoints`'],
    [{ type: 'etcd', endpoints: ['h:1'], leaseTtlS: 1 }, 'metadata.leaseTtlS'],
    [{ type: 'etcd', endpoints: ['h:1'], prefix: 'a b' }, 'metadata.prefix'],
    [{ type: 'consul' }, 'metadata.type'],
  ];
  for (const [bad, named] of refused) {
    try {
      validateConfig({ connector: 'mooncake-tcp', metadata: bad });
      assert.unreachable(JSON.stringify(bad));
    } catch (err) {
      assert.is((err as { code?: string }).code, 'INVALID_CONFIG', JSON.stringify(bad));
      assert.match((err as Error).message, named, JSON.stringify(bad));
    }
  }
});

test('etcd unreachable at start: PEER_UNREACHABLE naming the endpoint, within the deadline', async () => {
  const port = await freePort();
  const t0 = Date.now();
  try {
    await createTransferEngine(
      { connector: 'mooncake-tcp', bindAddress: '127.0.0.1', metadata: `etcd://127.0.0.1:${port}`, timeouts: { handshakeMs: 1500 } },
      { env: {} },
    );
    assert.unreachable('engine created without etcd');
  } catch (err) {
    assert.ok(isTransferError(err), String(err));
    assert.is((err as { code: string }).code, 'PEER_UNREACHABLE');
    assert.match((err as Error).message, `etcd at 127.0.0.1:${port}`);
  }
  const ms = Date.now() - t0;
  console.log(`  engine creation without etcd failed after ${ms} ms (deadline 1500 ms)`);
  assert.ok(ms < 5000, `${ms} ms`);
});

// Every case below needs a real etcd; without one each is registered as skipped.
const { etcdTest, suite } = etcdCases();
const { engine, peer } = suite;

etcdTest('engines in two processes find each other through etcd and move bytes both ways, byte-exact', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const b = await peer(prefix, 0x5a);
  const a = await engine(prefix);
  assert.equal(
    (await suite.etcd().keys(`${prefix}/segments/`)).sort(),
    [`${prefix}/segments/${a.segmentName}`, `${prefix}/segments/${b.segment}`].sort(),
    'one key per process, under the prefix',
  );
  const got = await readFrom(a, b.segment, b.addr + 100n, 4096);
  assert.ok(
    got.every((x) => x === 0x5a),
    'bytes read from the peer',
  );
  const src = randomBytes(256 * 1024);
  await writeTo(a, b.segment, b.addr + 4096n, src);
  assert.is(await b.sum(), expectedSum(0x5a, 4096, src), 'the peer holds exactly what was written, nothing else changed');
  // Another prefix is another deployment: the same etcd, nothing visible across.
  const other = await engine(`${prefix}-other`);
  assert.is(await codeOf(readFrom(other, b.segment, b.addr, 64)), 'PEER_NOT_FOUND');
});

etcdTest('a killed process: its descriptor leaves etcd within the lease TTL, and transfers to it fail typed', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const b = await peer(prefix, 1);
  const a = await engine(prefix);
  await readFrom(a, b.segment, b.addr, 64);
  b.child.kill('SIGKILL');
  const gone = await until(
    'descriptor removed',
    async () => !(await suite.etcd().keys(`${prefix}/segments/`)).includes(`${prefix}/segments/${b.segment}`),
    (PEER_TTL_S + 4) * 1000,
  );
  console.log(`  descriptor of the killed process gone from etcd after ${gone} ms (lease TTL ${PEER_TTL_S} s)`);
  assert.ok(gone <= (PEER_TTL_S + 2) * 1000, `${gone} ms`);
  // A process that knew it: a connection-level error or not found (the watch told it).
  const known = await codeOf(readFrom(a, b.segment, b.addr, 64));
  assert.ok(['CONNECTION_LOST', 'PEER_UNREACHABLE', 'PEER_NOT_FOUND', 'PEER_FAILED'].includes(known), known);
  const fresh = await engine(prefix);
  const t0 = Date.now();
  assert.is(await codeOf(readFrom(fresh, b.segment, b.addr, 64)), 'PEER_NOT_FOUND');
  assert.ok(Date.now() - t0 < 3000, 'a lookup of a gone process fails at once');
});

etcdTest('a live process whose key is overwritten (another epoch, or not a descriptor) writes its own again', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const b = await peer(prefix, 2);
  const key = `${prefix}/segments/${b.segment}`;
  const mine = (await suite.etcd().range(key)).get(key)!;
  await suite.etcd().put(key, Buffer.from('not a descriptor'));
  const ms = await until('own descriptor written back', async () => (await suite.etcd().range(key)).get(key)?.equals(mine) ?? false, 5000);
  console.log(`  an overwritten key held the owner's descriptor again after ${ms} ms`);
  const a = await engine(prefix);
  assert.ok((await readFrom(a, b.segment, b.addr, 4096)).every((x) => x === 2));
});

etcdTest("revocation still travels over the control plane: a region unregistered right after a lookup leaves the peer's view", async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const owner = await engine(prefix);
  const peer = await engine(prefix);
  const keep = await owner.registerMemory(Buffer.alloc(4096, 1));
  let gone = await owner.registerMemory(Buffer.alloc(4096, 2));
  for (let i = 0; i < 5; i++) {
    // A lookup only (descriptor from etcd), then at once the owner unregisters: by the
    // time the lookup returned, the owner must know this peer holds its descriptor.
    const seen = await peer.openSegment(owner.segmentName, { connect: false });
    assert.ok(seen.buffers.some((b) => b.addr === gone.addr));
    await owner.unregisterMemory(gone.addr);
    const after = await peer.openSegment(owner.segmentName, { connect: false });
    assert.not.ok(
      after.buffers.some((b) => b.addr === gone.addr),
      `round ${i}: the peer still lists the unregistered region`,
    );
    assert.ok(after.buffers.some((b) => b.addr === keep.addr));
    gone = await owner.registerMemory(Buffer.alloc(4096, 2));
    await peer.forgetSegment(owner.segmentName);
  }
});

etcdTest('a closed engine takes its descriptor and records out of etcd at once (lease revoked)', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const e = await engine(prefix);
  await e.metadataRecords!.put('probe/1', Buffer.from('x'));
  assert.is((await suite.etcd().keys(`${prefix}/`)).length, 2);
  await e.close();
  assert.equal(await suite.etcd().keys(`${prefix}/`), []);
});

etcdTest('records: bad input is refused with a TransferError, values round-trip', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const records = (await engine(prefix)).metadataRecords!;
  const bad: [() => Promise<unknown>, string][] = [
    [() => records.put('', Buffer.from('x')), 'INVALID_ARGUMENT'],
    [() => records.put('a b', Buffer.from('x')), 'INVALID_ARGUMENT'],
    [() => records.put(42 as unknown as string, Buffer.from('x')), 'INVALID_ARGUMENT'],
    [() => records.put('k', 'text' as unknown as Uint8Array), 'INVALID_ARGUMENT'],
    [() => records.put('k', new Uint8Array(600 * 1024)), 'INVALID_ARGUMENT'],
    [() => records.list('a b', 1000), 'INVALID_ARGUMENT'],
    [() => records.list('a', Number.NaN), 'INVALID_ARGUMENT'],
    [() => records.list('a', -1), 'INVALID_ARGUMENT'],
    // Past what a Node.js timer holds (it would run after 1 ms), and not a whole number of ms.
    [() => records.list('a', 3e9), 'INVALID_ARGUMENT'],
    [() => records.list('a', 1.5), 'INVALID_ARGUMENT'],
    [() => records.delete(''), 'INVALID_ARGUMENT'],
  ];
  for (const [call, code] of bad) assert.is(await codeOf(call()), code, call.toString());
  await records.put('pd/x/0', Uint8Array.from([1, 2, 3]));
  await records.put('pd/x/1', Uint8Array.from([4]));
  const got = await records.list('pd/x/', 2000);
  assert.equal([...got.keys()].sort(), ['pd/x/0', 'pd/x/1']);
  assert.equal([...got.get('pd/x/0')!], [1, 2, 3]);
  await records.delete('pd/x/0');
  assert.equal([...(await records.list('pd/', 2000)).keys()], ['pd/x/1']);
});

test.run();
