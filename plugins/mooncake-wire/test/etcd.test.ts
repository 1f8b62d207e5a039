// Mooncake's etcd key layout in a real etcd (Debian's etcd-server on loopback): a te target
// publishes its Mooncake descriptor and handshake address where Mooncake processes look, keeps
// it current at every (un)registration and removes it when it closes; a te initiator finds a
// segment there by name. Without etcd installed each case is registered as skipped.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, isTransferError } from '@te/connector';
import { EtcdServer, NO_ETCD } from '../../../packages/connector/test/fixtures/etcd.js';
import { parseSegment } from '../src/index.js';
import { etcdEndpoints } from '../src/mooncake-etcd.js';
import { wire } from './helpers.js';

test('metadataServer: P2PHANDSHAKE, etcd:// lists (default port 2379); other stores refused', async () => {
  assert.is(etcdEndpoints('P2PHANDSHAKE'), undefined);
  assert.equal(etcdEndpoints('etcd://10.0.0.5:2379,10.0.0.6'), ['10.0.0.5:2379', '10.0.0.6:2379']);
  assert.equal(etcdEndpoints('h:2380'), ['h:2380']);
  for (const bad of ['redis://h:6379', 'http://h:8080/metadata', 'etcd://']) {
    assert.throws(
      () => etcdEndpoints(bad),
      (e: unknown) => isTransferError(e) && e.code === 'INVALID_CONFIG',
    );
  }
});

if (NO_ETCD) {
  console.log(`  skipped etcd cases: ${NO_ETCD}`);
  test.skip(`te publishes and finds Mooncake segments in etcd — skipped: ${NO_ETCD}`, () => undefined);
} else {
  let etcd: EtcdServer;
  test.before(async () => {
    etcd = await EtcdServer.create();
  });
  test.after(async () => {
    await etcd?.stop();
  });

  test("te publishes and finds Mooncake segments in etcd, in Mooncake's key layout", async () => {
    const server = `etcd://${etcd.endpoint}`;
    const target = await wire({ listen: true, metadataServer: server, segmentName: 'prefill-0', clusterId: 'c7' });
    const init = await wire({ metadataServer: server, clusterId: 'c7' });
    try {
      const remote = new Uint8Array(8192);
      const reg = await target.registerMemory({ buffer: remote, length: 8192n, device: 'cpu', remoteAccess: true });
      const kv = await etcd.range('mooncake/c7/');
      assert.equal([...kv.keys()].sort(), ['mooncake/c7/ram/prefill-0', 'mooncake/c7/rpc_meta/prefill-0']);
      const d = parseSegment(kv.get('mooncake/c7/ram/prefill-0')!.toString(), 'prefill-0');
      assert.is(d.name, 'prefill-0');
      assert.equal(
        d.buffers.map((b) => [b.addr, b.length]),
        [[reg.addr, 8192n]],
        'current after registration',
      );
      const rpc = JSON.parse(kv.get('mooncake/c7/rpc_meta/prefill-0')!.toString());
      assert.equal(Object.keys(rpc), ['ip_or_host_name', 'rpc_port']);
      assert.is(rpc.ip_or_host_name, '127.0.0.1');

      // An initiator finds it by name, and the data lands.
      const src = new Uint8Array(4096).fill(0x3e);
      const s = await init.registerMemory({ buffer: src, length: 4096n, device: 'cpu', remoteAccess: false });
      const { peer } = await init.openSegment('prefill-0');
      await init.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: reg.addr + 10n, length: 4096 }]), { timeoutMs: 5000 });
      assert.ok(remote.subarray(10, 4106).every((b) => b === 0x3e));

      await target.unregisterMemory(reg.addr);
      assert.is(
        parseSegment((await etcd.range('mooncake/c7/ram/')).get('mooncake/c7/ram/prefill-0')!.toString(), 'x').buffers.length,
        0,
        'current after unregistration',
      );
      const missing = await init.openSegment('prefill-9').catch((e: unknown) => e);
      assert.ok(isTransferError(missing) && missing.code === 'INVALID_ARGUMENT', 'a name etcd does not know and that is no host:port');
    } finally {
      await init.close();
      await target.close();
    }
    assert.equal(await etcd.keys('mooncake/'), [], 'removed when the target closes');
  });

  test('etcd gone: a registration that cannot be published fails typed and leaves nothing registered', async () => {
    const t = await wire({ listen: true, metadataServer: `etcd://${etcd.endpoint}`, handshakeTimeoutMs: 800 });
    try {
      await etcd.stop();
      const buf = new Uint8Array(4096);
      const e = await t.registerMemory({ buffer: buf, length: 4096n, device: 'cpu', remoteAccess: true }).catch((x: unknown) => x);
      assert.ok(isTransferError(e) && e.code === 'PEER_UNREACHABLE', String(e));
      await etcd.start();
      // The etcd client holds back for a while after failures; the same memory must then
      // register again (a leftover of the failed attempt would be MEMORY_OVERLAP).
      let last: unknown;
      for (const end = Date.now() + 20_000; Date.now() < end; await new Promise((r) => setTimeout(r, 500))) {
        last = await t.registerMemory({ buffer: buf, length: 4096n, device: 'cpu', remoteAccess: true }).catch((x: unknown) => x);
        if (!isTransferError(last) || last.code !== 'PEER_UNREACHABLE') break;
      }
      assert.ok(!isTransferError(last), `registered again: ${String(last)}`);
    } finally {
      await t.close();
    }
  });
}

test.run();
